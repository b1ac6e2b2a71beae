package cudatest

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// FakeDriver builds src, the path of cudabridge/testdata/fakecuda.c from
// the calling test's directory, into a libcuda.so.1 in a directory of
// the test's own and returns the library's path. It skips the test
// without a C compiler (cc, gcc or clang), or when the compiler refuses
// the source.
func FakeDriver(tb testing.TB, src string) string {
	tb.Helper()
	cc := ""
	for _, name := range []string{"cc", "gcc", "clang"} {
		if p, err := exec.LookPath(name); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		tb.Skipf("no C compiler (cc, gcc or clang) to build %s", src)
	}
	lib := filepath.Join(tb.TempDir(), "libcuda.so.1")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-ffp-contract=off", "-o", lib, src).CombinedOutput(); err != nil {
		tb.Skipf("%s cannot build the fake driver %s: %v: %s", cc, src, err, out)
	}
	return lib
}
