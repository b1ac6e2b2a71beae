//go:build !windows

package cudabridge

import (
	"runtime"

	"github.com/ebitengine/purego"
)

// dlopen, dlsym and dlclose load the driver library (dlopen(3)). A failed
// dlopen or dlsym is told by dlerror(3), which is the thread's own:
// purego makes the two calls apart, so the goroutine is held to its
// thread across them, or the reason can come back empty (it did, once in
// a few runs of the tests beside others).
func dlopen(name string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(h uintptr, name string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlsym(h, name)
}

func dlclose(h uintptr) { _ = purego.Dlclose(h) }
