package cudabridge

import (
	"errors"
	"strings"
	"testing"
)

// TestOpenDriverMissingLibrary: a library that is not there is an error
// wrapping ErrNoDriver that names it and carries the loader's reason.
func TestOpenDriverMissingLibrary(t *testing.T) {
	_, err := openDriver("libcuda-batchd-test-missing.so.1")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("err %v, want ErrNoDriver", err)
	}
	for _, want := range []string{"libcuda-batchd-test-missing.so.1", "not found", "cannot open shared object file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestOpenDriverWrongLibrary: a library without the driver's symbols (the
// C library) is an error naming the first missing symbol, not a panic.
func TestOpenDriverWrongLibrary(t *testing.T) {
	_, err := openDriver("libc.so.6")
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "has no cuInit") {
		t.Fatalf("err %v, want ErrNoDriver naming cuInit", err)
	}
}

// TestEntryPointsWithoutDriver: on a machine without libcuda.so.1 every
// entry point returns the same clear ErrNoDriver error. Skipped where a
// driver is installed.
func TestEntryPointsWithoutDriver(t *testing.T) {
	if _, err := loadDriver(); err == nil || !errors.Is(err, ErrNoDriver) {
		t.Skipf("a CUDA driver is installed here (load: %v)", err)
	}
	if _, _, err := ListDevices(); !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Errorf("ListDevices: %v", err)
	}
	if _, err := DeviceCount(); !errors.Is(err, ErrNoDriver) {
		t.Errorf("DeviceCount: %v", err)
	}
	if _, err := OpenDevice(DefaultDeviceConfig(0)); !errors.Is(err, ErrNoDriver) {
		t.Errorf("OpenDevice: %v", err)
	}
}

func TestCUDAErrorText(t *testing.T) {
	e := &CUDAError{Op: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Text: "out of memory"}
	if got, want := e.Error(), "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	e = &CUDAError{Op: "cuInit", Code: 999}
	if got, want := e.Error(), "cuInit: CUresult 999"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := DriverVersion(12040).String(), "12.4"; got != want {
		t.Errorf("driver version %q, want %q", got, want)
	}
}
