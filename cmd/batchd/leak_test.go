package main

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind, and points the
// job store's default directory ($XDG_STATE_HOME) at a directory of this
// process, removed at the end: the serve tests run the embedded
// configuration, and must neither touch the user's store nor contend for
// its lock with a running batchd. A helper child process (see helperEnv)
// keeps the directory its parent chose.
func TestMain(m *testing.M) {
	dir := ""
	if os.Getenv(helperEnv) == "" {
		var err error
		if dir, err = os.MkdirTemp("", "batchd-cmd-test-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("XDG_STATE_HOME", dir)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}
