package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/server"
)

// freeRun finds base ports for n consecutive TCP ports (and UDP ones,
// with udp) that are free now, away from the defaults other runs use and
// below the kernel's ephemeral range (from 32768 on Linux), where another
// test's outgoing connection could take one before the script binds it.
func freeRun(t *testing.T, n int, udp bool, avoid map[int]bool) int {
	t.Helper()
	for range 50 {
		base := 20000 + rand.IntN(12000)
		ok := true
		for p := base; p < base+n && ok; p++ {
			if avoid[p] {
				ok = false
				break
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
			if udp {
				pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
				if err != nil {
					ok = false
					break
				}
				pc.Close()
			}
		}
		if ok {
			for p := base; p < base+n; p++ {
				avoid[p] = true
			}
			return base
		}
	}
	t.Fatalf("no %d free ports in a row", n)
	return 0
}

// TestLocalCluster runs `make cluster`'s script (cluster/local.sh) on a
// freshly built batchd with three nodes of two devices on free loopback
// ports: every front answers an inference, `batchd status` at every front
// lists the three nodes alive and names one owner of the model, and
// SIGTERM to the script stops the nodes one at a time, each cleanly
// (exit status 0, "every request answered" in each log, no node left).
// It skips where sh, curl or the go command is missing.
func TestLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds batchd and runs three nodes")
	}
	for _, tool := range []string{"sh", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: cluster/local.sh needs it", tool)
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build batchd with")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "batchd")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	const nodes = 3
	avoid := map[int]bool{}
	httpBase := freeRun(t, nodes, false, avoid)
	gossipBase := freeRun(t, nodes, true, avoid)
	dataBase := freeRun(t, nodes, false, avoid)
	state := filepath.Join(dir, "cluster")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	script := exec.Command("sh", "../../cluster/local.sh")
	script.Env = append(os.Environ(), "BIN="+bin, "NODES="+strconv.Itoa(nodes), "DEVICES=2", "DIR="+state,
		"HTTP_BASE="+strconv.Itoa(httpBase), "GOSSIP_BASE="+strconv.Itoa(gossipBase), "DATA_BASE="+strconv.Itoa(dataBase))
	script.Stdout, script.Stderr = &out, &out
	script.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := script.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- script.Wait() }()
	// Whatever happens, no node outlives the test.
	t.Cleanup(func() {
		_ = syscall.Kill(-script.Process.Pid, syscall.SIGKILL)
		for i := range nodes {
			if b, err := os.ReadFile(filepath.Join(state, fmt.Sprintf("n%d.pid", i))); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	})
	logs := func() string {
		var b strings.Builder
		for i := range nodes {
			l, _ := os.ReadFile(filepath.Join(state, fmt.Sprintf("n%d.log", i)))
			fmt.Fprintf(&b, "--- n%d.log\n%s", i, l)
		}
		return out.String() + "\n" + b.String()
	}

	// Up: the script prints its fronts, then batchd status.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "shows it again") {
		select {
		case err := <-exited:
			t.Fatalf("cluster/local.sh exited (%v) before the cluster was up:\n%s", err, logs())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster/local.sh: no cluster in 60 s:\n%s", logs())
		}
	}
	if !strings.Contains(out.String(), fmt.Sprintf("%d nodes up", nodes)) {
		t.Errorf("the script's output does not say %d nodes are up:\n%s", nodes, out.String())
	}

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	owners := map[string]bool{}
	for i := range nodes {
		front := "http://127.0.0.1:" + strconv.Itoa(httpBase+i)
		resp, err := client.Post(front+"/v1/models/echo/infer", "application/json", strings.NewReader(`{"input":"hello"}`))
		if err != nil {
			t.Fatalf("front n%d: %v\n%s", i, err, logs())
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"output":"echo@v1:`)) {
			t.Errorf("front n%d: %d %s", i, resp.StatusCode, body)
		}

		// batchd status, until this front has heard of every node (gossip
		// converges within a few probe intervals of 1 s).
		var st server.ClusterStatus
		var alive []string
		for try := 0; ; try++ {
			cmd := exec.Command(bin, "status", "--json", "--url", front)
			b, err := cmd.Output()
			if err != nil {
				t.Fatalf("batchd status --url %s: %v\n%s", front, err, logs())
			}
			st = server.ClusterStatus{}
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatalf("batchd status --json: %v\n%s", err, b)
			}
			alive = alive[:0]
			for _, m := range st.Members {
				if m.State == "alive" && m.Devices == 2 {
					alive = append(alive, m.Node)
				}
			}
			slices.Sort(alive)
			if len(alive) == nodes || try == 100 {
				break
			}
			time.Sleep(100 * time.Millisecond) // polling gossip's convergence, bounded
		}
		if want := []string{"n0", "n1", "n2"}; !slices.Equal(alive, want) || st.Node != fmt.Sprintf("n%d", i) {
			t.Errorf("batchd status at n%d: node %s, alive with 2 devices %v, want %v (%+v)", i, st.Node, alive, want, st.Members)
		}
		owners[st.Owners["echo"]] = true
	}
	if len(owners) != 1 || owners[""] {
		t.Errorf("the fronts name the owners %v of echo: want one node", owners)
	}

	// SIGTERM to the script (as make's Ctrl-C would be): it stops every
	// node, one at a time, and exits 0 only if each stopped cleanly.
	if err := script.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("cluster/local.sh after SIGTERM: %v\n%s", err, logs())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("cluster/local.sh: no exit 60 s after SIGTERM\n%s", logs())
	}
	for i := range nodes {
		l, _ := os.ReadFile(filepath.Join(state, fmt.Sprintf("n%d.log", i)))
		if !bytes.Contains(l, []byte("stopped: every request answered")) {
			t.Errorf("n%d did not stop gracefully:\n%s", i, l)
		}
		b, _ := os.ReadFile(filepath.Join(state, fmt.Sprintf("n%d.pid", i)))
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Errorf("n%d.pid: %v", i, err)
		} else if syscall.Kill(pid, 0) == nil {
			t.Errorf("n%d (pid %d) still runs after the script's stop", i, pid)
		}
	}
}
