//go:build linux

package cudabridge

import (
	"syscall"
	"time"
	"unsafe"
)

// rawSleep sleeps d on the calling thread with a raw nanosleep: the
// runtime is not told, so the goroutine keeps its processor (nothing else
// runs there meanwhile, and nothing has to hand it back), and the thread
// is the kernel's to wake on time. A signal may end it early.
func rawSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	_, _, _ = syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// waitSleepSupported says whether DeviceConfig.WaitSleep can work here.
const waitSleepSupported = true
