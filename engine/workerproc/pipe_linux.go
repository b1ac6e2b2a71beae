package workerproc

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeBytes is the pipes' buffer: a batch of 100 inputs of 1 KB (100 KB)
// then goes into the pipe in one write, without waiting for the worker to
// drain the default 64 KiB; fs.pipe-max-size (1 MiB by default) caps it.
const pipeBytes = 1 << 20

// growPipe enlarges f's pipe buffer to pipeBytes, where the kernel allows
// (a failure leaves the default: slower, no less correct).
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeBytes)
	})
}
