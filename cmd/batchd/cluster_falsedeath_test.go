package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/server"
)

// TestClusterProcessFalseDeath: three real nodes under load through every
// front; a node that does not own echo is stopped (SIGSTOP) until the
// others declare it dead, then continued (SIGCONT): a false death, as a
// long GC pause or a healed partition makes one. memberlist on the node
// refutes its death, and the node takes a new life: every node, itself
// included, sees it alive at a higher incarnation within procWait; the
// owner's batcher takes its devices again (devices healthy back to all
// six) and runs batches on them (the node receives data-plane messages
// under load through the other fronts alone); every request through
// every front across the false death, the stopped node's included, is
// answered once, 200 with its own output or a clear error, none lost;
// after the return every front answers 200. Seen to fail without the new
// life: the others keep the node dead at its incarnation for good. (The
// stopped node's requests in flight at the stop are answered because the
// data plane keeps a working stream to a node declared dead: without
// that, their replies were dropped in 3 of 10 runs.)
func TestClusterProcessFalseDeath(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops server processes")
	}
	nodes := startProcCluster(t, t.TempDir(), 3, procDefaults)
	ownerName := owner(t, nodes[0])
	var victim, own *procNode
	var others []*procNode
	for _, nd := range nodes {
		switch {
		case nd.name == ownerName:
			own = nd
			others = append(others, nd)
		case victim == nil:
			victim = nd
		default:
			others = append(others, nd)
		}
	}
	before, _ := memberOf(clusterStatus(t, own.s.base), victim.name)
	logNodesOnFailure(t, nodes)
	healthy := func() float64 { v, _ := gauge(t, own.s.base, "batchd_devices_healthy"); return v }
	// waitHealthy waits, at most procWait, for the owner to hold all six
	// devices healthy. Every node alive to every other does not yet mean
	// the owner has taken the others' devices: their adverts come after.
	waitHealthy := func(when string) {
		t.Helper()
		for end := time.Now().Add(procWait); healthy() != 6; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the owner has %v healthy devices %v %s, want 6", healthy(), procWait, when)
			}
		}
	}
	waitHealthy("after every node saw every other alive")

	load := newProcLoad()
	for _, nd := range nodes {
		load.run(nd.name, nd.s.base, 3, nil)
	}
	time.Sleep(time.Second) // load before the stop
	if err := victim.s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	continued := false
	cont := func() {
		if !continued {
			continued = true
			_ = victim.s.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer cont() // whatever happens, the child is not left stopped
	for _, nd := range others {
		waitStatus(t, nd.s.base, nd.name+" sees "+victim.name+" dead", func(st server.ClusterStatus) bool {
			m, _ := memberOf(st, victim.name)
			return m.State == "dead"
		})
	}
	dead := time.Since(stopped)
	if h := healthy(); h != 4 {
		t.Errorf("the owner has %v healthy devices with %s dead, want 4", h, victim.name)
	}
	cont()
	resumed := time.Now()
	var back time.Duration
	for _, nd := range append([]*procNode{victim}, others...) {
		waitStatus(t, nd.s.base, nd.name+" sees "+victim.name+" alive at a new incarnation", func(st server.ClusterStatus) bool {
			m, _ := memberOf(st, victim.name)
			return m.State == "alive" && m.Incarnation > before.Incarnation
		})
		back = max(back, time.Since(resumed))
	}
	waitHealthy("after " + victim.name + " came back")
	st := clusterStatus(t, victim.s.base)
	t.Logf("%s stopped; dead to the others after %v; alive to all at incarnation %d (was %d) %v after SIGCONT; the owner's 6 devices healthy %v after",
		victim.name, dead.Round(time.Millisecond), st.Incarnation, before.Incarnation, back.Round(time.Millisecond), time.Since(resumed).Round(time.Millisecond))
	if seen := memberIncarnation(t, own, victim.name); st.Incarnation != seen {
		t.Errorf("%s says its incarnation is %d, the owner holds it at %d", victim.name, st.Incarnation, seen)
	}
	time.Sleep(time.Second) // load after the return
	results, frozen := frozenPast(load.end(), victim.name, stopped, resumed)
	ok, failed := checkInvariants(t, results)
	t.Logf("%d requests through every front across the false death: %d 200, %d errors; %d through %s answered by its own guard, their deadline and grace past while it was stopped",
		len(results), ok, failed, frozen, victim.name)

	// The victim's devices take batches again: load through the other
	// fronts only, and data-plane messages come to the victim (batches
	// for its devices from the owner).
	received := func() float64 {
		v, _ := gauge(t, victim.s.base, `batchd_cluster_messages_total{fate="received"}`)
		return v
	}
	r0 := received()
	healed := loadSecond(others, 3)
	ok, failed = checkInvariants(t, healed)
	got := received() - r0
	t.Logf("%d requests through the other fronts after the return: %d 200, %d errors; %s received %v data-plane messages", len(healed), ok, failed, victim.name, got)
	if failed != 0 || ok == 0 || got == 0 {
		t.Errorf("after the return: %d 200, %d errors, %v messages to %s: want every request 200, and batches on %s's devices", ok, failed, got, victim.name, victim.name)
	}
	// And through every front, its own included.
	results = loadSecond(nodes, 2)
	ok, failed = checkInvariants(t, results)
	viaVictim := okVia(results, victim.name)
	t.Logf("%d requests through every front after the return: %d 200, %d errors, %d 200 through %s's", len(results), ok, failed, viaVictim, victim.name)
	if failed != 0 || viaVictim == 0 {
		t.Errorf("after the return: %d errors, %d 200 through %s's front: want none and some", failed, viaVictim, victim.name)
	}
}

// frozenPast takes out of results the requests through front that its own
// guard answered (frontExpiry) whose deadline and reply grace ended while
// front's process was stopped (from stopped to resumed), and counts them.
// A stopped process answers nothing in time; once continued, its front's
// expiry timer and the replies waiting in its sockets race, and either may
// answer first: a clear error, not a loss. It happens under the race
// detector, whose tests keep memberlist's LAN settings: a death is
// declared 5 to 8 s after the stop, past procSLO plus procReplyGrace.
func frozenPast(results []procResult, front string, stopped, resumed time.Time) ([]procResult, int) {
	kept := results[:0:0]
	n := 0
	for _, r := range results {
		if r.front == front && r.start.Before(stopped) && r.start.Add(procSLO+procReplyGrace).Before(resumed) && strings.Contains(r.errMsg, frontExpiry) {
			n++
			continue
		}
		kept = append(kept, r)
	}
	return kept, n
}
