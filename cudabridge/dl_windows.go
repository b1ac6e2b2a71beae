package cudabridge

import "errors"

// errNoDlopen: on Windows the driver is nvcuda.dll, which this bridge does
// not load. The rest of batchd (the simulator, the emulated backend)
// builds and runs there.
var errNoDlopen = errors.New("this bridge does not load the CUDA driver on Windows")

func dlopen(string) (uintptr, error) { return 0, errNoDlopen }

func dlsym(uintptr, string) (uintptr, error) { return 0, errNoDlopen }

func dlclose(uintptr) {}
