package enginetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// NodeModules installs the npm packages of a client no one here wrote
// (dir's package.json and package-lock.json) with npm ci into a cache
// directory named by the lockfile's hash, once, and returns its
// node_modules; marker is a file under node_modules that a finished
// install has. It skips the test, saying why, without node and npm or
// when the registry cannot be reached.
func NodeModules(t *testing.T, dir, marker string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH (Debian: apt-get install nodejs npm): skipping the check with a node client", tool)
		}
	}
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	inst := filepath.Join(cache, "batchd", "node-"+hex.EncodeToString(sum[:6]))
	mods := filepath.Join(inst, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, marker)); err == nil {
		return mods
	}
	if err := os.MkdirAll(inst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(inst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = inst
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(mods)
		t.Skipf("npm ci in %s failed (no npm registry?): %v\n%s", dir, err, out)
	}
	return mods
}
