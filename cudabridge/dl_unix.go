//go:build !windows

package cudabridge

import "github.com/ebitengine/purego"

// dlopen, dlsym and dlclose load the driver library (dlopen(3)).
func dlopen(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

func dlclose(h uintptr) { _ = purego.Dlclose(h) }
