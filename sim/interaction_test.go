package sim

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
)

// Interaction tests, in the style of etcd raft's: small scenarios written as
// scripts in testdata/*.txt, run against the real actors on a World, with
// the expected trace of deliveries written under each `run`. The expected
// output is an assertion about what the actors should do, reviewed by hand
// line by line; `go test ./sim -run Interaction -update` rewrites it from
// what they do now, for review in the diff.
//
// A script is a sequence of directives, one a line. `#` starts a comment.
// Directives that print something (run, stats) are followed by a line
// `----` and their expected output, which ends at a blank line or the end
// of the file.
//
//	config batch-max=4 devices=2 latency=100ms slo=200ms
//	    Starts a fresh world (a script may hold several, one after the
//	    other): one actors.Batcher at Address{ID:1} ("batcher"), the client
//	    at Address{ID:2} ("client", a sim.Ledger that checks every reply),
//	    and devices actors.Device at Address{ID:100+i} ("dev<i>"), each run
//	    by a sim.Device model behind a scriptable fault wrapper. Options and
//	    defaults: batch-max=4 devices=1 latency=100ms (the devices' fixed
//	    batch time, also the actors' prediction) slo=200ms margin=5ms
//	    queue-max=1000 (per key) queue-total-max=1000 attempt-max=3
//	    timeout-max=60s watchdog=3 backoff=100ms quarantine-after=5
//	    quarantine-for=30s net-delay=0 seed=1. Inputs that start with
//	    "poison" fail every batch they are in (FaultPlan.PoisonPrefix).
//	submit at=0ms id=1 model=m version=v1 input=aaa timeout=300ms
//	    Injects a Submit from outside at `at` (default: now). id may be a
//	    range, 1..4, submitted `every` apart (default 0). Defaults: model m,
//	    version v1, input in<id>, tenant t; without timeout the deadline is
//	    left to the batcher's SLO.
//	cancel at=7ms id=2
//	drain at=50ms
//	fault device=0 next=crash
//	    Queues a fault for the next job device 0 starts: crash (the job ends
//	    with JobDone.Fault at frac=0.5 of its latency), hang (no JobDone,
//	    ever), error (the whole batch fails at its full latency), slow
//	    (factor=4: the job takes factor times its latency, then succeeds),
//	    item-error (item=0: that item of the job fails on its own).
//	    Several faults queue up in order.
//	run until=1s
//	    Runs the world to `until` and prints every delivery since the last
//	    run, in delivery order: virtual time, sender -> receiver ("ext" is
//	    the outside world; timers and job results come from the actor
//	    itself), the message and its key fields. The actors' Start and the
//	    batcher's own wake-up timer are left out: the batcher's decisions
//	    show as the messages it sends. A completed reply whose output is
//	    not its own input's is marked WRONG-OUTPUT; a batch item on its
//	    second or later attempt shows it as id:a<attempt>.
//	stats
//	    Prints the batcher's counters.
//
// At the end of each world the ledger is closed: a request without a reply,
// a duplicate reply, a wrong output or any other invariant it checks fails
// the test, whatever the golden output says.

var update = flag.Bool("update", false, "rewrite the expected output of the interaction tests in testdata")

func TestInteraction(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no interaction scripts in testdata")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file)
		})
	}
}

// scriptLine is one line of a script, with the expected output that follows
// it when it is a directive that prints.
type scriptLine struct {
	text   string // as written
	lineNo int
	// hasOutput: the line is followed by `----` and an expected output.
	hasOutput bool
	expected  []string
}

// parseScript splits a script into lines, attaching each expected output
// to the directive above it.
func parseScript(t *testing.T, file string) []scriptLine {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []scriptLine
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	lineNo := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		lineNo++
		return sc.Text(), true
	}
	for {
		text, ok := next()
		if !ok {
			break
		}
		if text == "----" {
			if len(out) == 0 || scriptDirective(out[len(out)-1].text) == "" {
				t.Fatalf("%s:%d: ---- without a directive above it", file, lineNo)
			}
			prev := &out[len(out)-1]
			prev.hasOutput = true
			for {
				l, ok := next()
				if !ok || l == "" {
					break
				}
				prev.expected = append(prev.expected, l)
			}
			continue
		}
		out = append(out, scriptLine{text: text, lineNo: lineNo})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// directive returns the directive word of a line, or "" for a comment or
// a blank line.
func scriptDirective(line string) string {
	f := strings.Fields(stripScriptComment(line))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func stripScriptComment(line string) string {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		return line[:i]
	}
	return line
}

func runScript(t *testing.T, file string) {
	lines := parseScript(t, file)
	var rewritten strings.Builder
	var h *scriptWorld
	finish := func() {
		if h != nil {
			h.finish()
		}
	}
	for _, l := range lines {
		rewritten.WriteString(l.text)
		rewritten.WriteByte('\n')
		word := scriptDirective(l.text)
		if word == "" {
			continue
		}
		where := fmt.Sprintf("%s:%d", file, l.lineNo)
		a := parseScriptArgs(t, where, strings.Fields(stripScriptComment(l.text))[1:])
		if word == "config" {
			finish()
			h = newScriptWorld(t, where, a)
			a.done(t, where)
			continue
		}
		if h == nil {
			t.Fatalf("%s: %s before any config", where, word)
		}
		got, prints := h.do(where, word, a)
		a.done(t, where)
		if !prints {
			if l.hasOutput {
				t.Fatalf("%s: %s prints nothing, but an output follows it", where, word)
			}
			continue
		}
		rewritten.WriteString("----\n")
		for _, g := range got {
			rewritten.WriteString(g)
			rewritten.WriteByte('\n')
		}
		rewritten.WriteByte('\n')
		if !*update && !slices.Equal(got, l.expected) {
			t.Errorf("%s: %s: output differs (-want +got):\n%s", where, l.text, scriptDiff(l.expected, got))
		}
	}
	finish()
	if *update {
		out := strings.TrimRight(rewritten.String(), "\n") + "\n"
		if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scriptDiff is a small line diff for failure messages: the lines of want
// and got with the first difference marked, so a reader sees where the
// scenario went another way.
func scriptDiff(want, got []string) string {
	var b strings.Builder
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	for _, l := range want[:i] {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	for _, l := range want[i:] {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	for _, l := range got[i:] {
		fmt.Fprintf(&b, "+ %s\n", l)
	}
	return b.String()
}

// scriptArgs are a directive's key=value arguments. Each must be read, so
// that a misspelt key fails rather than being ignored.
type scriptArgs struct {
	vals map[string]string
	used map[string]bool
}

func parseScriptArgs(t *testing.T, where string, fields []string) *scriptArgs {
	a := &scriptArgs{vals: map[string]string{}, used: map[string]bool{}}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("%s: argument %q: want key=value", where, f)
		}
		if _, dup := a.vals[k]; dup {
			t.Fatalf("%s: argument %q given twice", where, k)
		}
		a.vals[k] = v
	}
	return a
}

func (a *scriptArgs) str(k, def string) string {
	a.used[k] = true
	if v, ok := a.vals[k]; ok {
		return v
	}
	return def
}

func (a *scriptArgs) has(k string) bool { _, ok := a.vals[k]; return ok }

func (a *scriptArgs) done(t *testing.T, where string) {
	for k := range a.vals {
		if !a.used[k] {
			t.Fatalf("%s: unknown argument %q", where, k)
		}
	}
}

func (a *scriptArgs) dur(t *testing.T, where, k string, def time.Duration) time.Duration {
	v := a.str(k, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %s: %v", where, k, err)
	}
	return d
}

func (a *scriptArgs) num(t *testing.T, where, k string, def int) int {
	v := a.str(k, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %s: %v", where, k, err)
	}
	return n
}

func (a *scriptArgs) float(t *testing.T, where, k string, def float64) float64 {
	v := a.str(k, "")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s: %s: %v", where, k, err)
	}
	return f
}

// scriptWorld is one world of a script.
type scriptWorld struct {
	t       *testing.T
	where   string // the config line
	w       *World
	b       *actors.Batcher
	ledger  *ledger.Ledger
	devs    []*scriptedDevice
	names   map[actors.Address]string
	reqs    map[uint64]actors.Request
	trace   []string // deliveries since the last run
	lastRun time.Duration
}

const interactionPoison = "poison"

func newScriptWorld(t *testing.T, where string, a *scriptArgs) *scriptWorld {
	latency := actors.FixedLatency(a.dur(t, where, "latency", 100*time.Millisecond))
	bc := actors.DefaultBatcherConfig()
	bc.BatchMax = a.num(t, where, "batch-max", 4)
	bc.SLO = a.dur(t, where, "slo", 200*time.Millisecond)
	bc.Margin = a.dur(t, where, "margin", 5*time.Millisecond)
	bc.QueueMax = a.num(t, where, "queue-max", 1000)
	bc.QueueTotalMax = a.num(t, where, "queue-total-max", max(1000, bc.QueueMax))
	bc.AttemptMax = a.num(t, where, "attempt-max", 3)
	bc.TimeoutMax = a.dur(t, where, "timeout-max", 60*time.Second)
	bc.Latency = latency
	dc := actors.DefaultDeviceConfig()
	dc.Latency = latency
	dc.WatchdogMultiple = a.num(t, where, "watchdog", 3)
	dc.RestartBackoff = a.dur(t, where, "backoff", 100*time.Millisecond)
	dc.QuarantineAfter = a.num(t, where, "quarantine-after", 5)
	dc.QuarantineFor = a.dur(t, where, "quarantine-for", 30*time.Second)
	devices := a.num(t, where, "devices", 1)
	wc := DefaultWorldConfig(uint64(a.num(t, where, "seed", 1)))
	wc.NetDelay = a.dur(t, where, "net-delay", 0)

	b, err := actors.NewBatcher(bc)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	ledger, err := ledger.New(ledger.Config{
		Batcher: BatcherAddr, BatchMax: bc.BatchMax, AttemptMax: bc.AttemptMax,
		QueueTotalMax: bc.QueueTotalMax, SLO: bc.SLO, Probe: b.Stats,
	})
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	h := &scriptWorld{
		t: t, where: where, w: NewWorld(wc), b: b, ledger: ledger,
		names: map[actors.Address]string{{}: "ext", BatcherAddr: "batcher", LedgerAddr: "client"},
		reqs:  map[uint64]actors.Request{},
	}
	h.w.Observe(ledger)
	h.w.Observe(h)
	h.w.Spawn(BatcherAddr, b)
	h.w.Spawn(LedgerAddr, ledger)
	for i := range devices {
		addr := actors.Address{ID: DeviceAddrBase + uint64(i)}
		h.names[addr] = fmt.Sprintf("dev%d", i)
		da, err := actors.NewDevice(dc, BatcherAddr)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		model := NewDevice(latency, FaultPlan{PoisonPrefix: interactionPoison}, h.w.Stream(fmt.Sprintf("device/%d", i)))
		sd := &scriptedDevice{model: model, latency: latency}
		h.devs = append(h.devs, sd)
		h.w.SetExecutor(addr, sd)
		h.w.Spawn(addr, da)
	}
	// Deliver the Starts, so that the devices have announced themselves
	// before the script's first submit at 0; the announcements show in the
	// first run's output.
	if err := h.w.RunUntil(0); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return h
}

// do runs one directive and returns its output, and whether it prints.
func (h *scriptWorld) do(where, word string, a *scriptArgs) ([]string, bool) {
	t := h.t
	now := h.w.Now()
	// when reads the at= argument of a directive that injects a message.
	when := func() time.Duration {
		at := a.dur(t, where, "at", now)
		if at < now {
			t.Fatalf("%s: at=%v is before now (%v)", where, at, now)
		}
		return at
	}
	switch word {
	case "submit":
		at := when()
		lo, hi := h.idRange(where, a.str("id", ""))
		every := a.dur(t, where, "every", 0)
		timeout := a.dur(t, where, "timeout", 0)
		model, version := a.str("model", "m"), a.str("version", "v1")
		input, tenant := a.str("input", ""), a.str("tenant", "t")
		for id := lo; id <= hi; id++ {
			in := input
			if in == "" {
				in = fmt.Sprintf("in%d", id)
			}
			req := actors.Request{ID: id, Tenant: tenant, Model: model, Version: version, Input: in,
				Arrival: at, ReplyTo: LedgerAddr}
			if timeout > 0 {
				req.Deadline = at + timeout
			}
			h.reqs[id] = req
			h.w.Inject(at, BatcherAddr, actors.Submit{Req: req})
			at += every
		}
	case "cancel":
		at := when()
		lo, hi := h.idRange(where, a.str("id", ""))
		for id := lo; id <= hi; id++ {
			h.w.Inject(at, BatcherAddr, actors.Cancel{ID: id})
		}
	case "drain":
		at := when()
		h.w.Inject(at, BatcherAddr, actors.Drain{})
	case "fault":
		i := a.num(t, where, "device", -1)
		if i < 0 || i >= len(h.devs) {
			t.Fatalf("%s: fault: device=%d: there are %d devices", where, i, len(h.devs))
		}
		f := scriptFault{kind: a.str("next", "")}
		switch f.kind {
		case "crash":
			f.frac = a.float(t, where, "frac", 0.5)
		case "slow":
			f.factor = a.float(t, where, "factor", 4)
		case "item-error":
			f.item = a.num(t, where, "item", 0)
		case "hang", "error":
		default:
			t.Fatalf("%s: fault: next=%q: want crash, hang, error, slow or item-error", where, f.kind)
		}
		h.devs[i].next = append(h.devs[i].next, f)
	case "run":
		if !a.has("until") {
			t.Fatalf("%s: run needs until=", where)
		}
		until := a.dur(t, where, "until", 0)
		if until < now {
			t.Fatalf("%s: run until=%v: the clock is at %v", where, until, now)
		}
		if err := h.w.RunUntil(until); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		out := h.trace
		h.trace = nil
		if len(out) == 0 {
			out = []string{"(nothing delivered)"}
		}
		return out, true
	case "stats":
		s := h.b.Stats()
		return []string{fmt.Sprintf("queued=%d held=%d devices=%d ready=%d batches=%d rejected=%d expired=%d cancelled=%d retried=%d",
			s.Queued, s.Held, s.Devices, s.Ready, s.Batches, s.Rejected, s.Expired, s.Cancelled, s.Retried)}, true
	default:
		t.Fatalf("%s: unknown directive %q", where, word)
	}
	return nil, false
}

func (h *scriptWorld) idRange(where, s string) (uint64, uint64) {
	lo, hi, isRange := strings.Cut(s, "..")
	a, err1 := strconv.ParseUint(lo, 10, 64)
	b, err2 := a, error(nil)
	if isRange {
		b, err2 = strconv.ParseUint(hi, 10, 64)
	}
	if s == "" || err1 != nil || err2 != nil || a == 0 || b < a || b-a > 1000 {
		h.t.Fatalf("%s: id=%q: want a number or a range lo..hi of ids from 1", where, s)
	}
	return a, b
}

// finish closes the ledger: every request must have had exactly one reply,
// the right output, and every other invariant the ledger checks.
func (h *scriptWorld) finish() {
	h.ledger.Finish(h.w.Now())
	if n, first := h.ledger.Violations(); n > 0 {
		h.t.Errorf("%s: the world of this config broke %d invariants by %v: %q", h.where, n, h.w.Now(), first)
	}
	if len(h.trace) > 0 {
		h.t.Errorf("%s: deliveries after the last run are not asserted: end the scenario with a run", h.where)
	}
}

// Deliver implements Observer: it renders one delivery as a trace line.
func (h *scriptWorld) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	var s string
	switch m := msg.(type) {
	case actors.Start:
		return
	case actors.Submit:
		q := m.Req
		s = fmt.Sprintf("Submit %d %s@%s %s", q.ID, q.Model, q.Version, q.Input)
		if q.Deadline != 0 {
			s += " deadline=" + fmtVirtual(q.Deadline)
		}
	case actors.Cancel:
		s = fmt.Sprintf("Cancel %d", m.ID)
	case actors.Drain:
		s = "Drain"
	case actors.Reply:
		s = h.fmtReply(from, m)
	case actors.RunBatch:
		s = fmt.Sprintf("RunBatch b%d %s@%s %s", m.Batch.ID, m.Batch.Key.Model, m.Batch.Key.Version, fmtBatchItems(m.Batch.Items))
	case actors.BatchDone:
		s = fmt.Sprintf("BatchDone b%d", m.BatchID)
	case actors.BatchAborted:
		s = fmt.Sprintf("BatchAborted b%d pending=%v %q", m.BatchID, m.Pending, m.Reason)
	case actors.DeviceReady:
		s = fmt.Sprintf("DeviceReady incarnation=%d", m.Incarnation)
		if len(m.Models) > 0 {
			s += fmt.Sprintf(" models=%v", m.Models)
		}
	case actors.DeviceDown:
		s = fmt.Sprintf("DeviceDown until=%s %q", fmtVirtual(m.Until), m.Reason)
	case actors.JobDone:
		s = fmt.Sprintf("JobDone j%d ", m.ID)
		switch {
		case m.Fault:
			s += "fault"
		case m.Err != "":
			s += fmt.Sprintf("error %q", m.Err)
		case m.ItemErrs != nil:
			var bad []int
			for i, e := range m.ItemErrs {
				if e != "" {
					bad = append(bad, i)
				}
			}
			s += fmt.Sprintf("ok, item errors at %v", bad)
		default:
			s += "ok"
		}
	default:
		// Actors' private messages: timers. The batcher's wake-up is left
		// out (its decisions show in what it sends); others are shown by
		// type and fields.
		name := strings.TrimPrefix(fmt.Sprintf("%T", msg), "actors.")
		if name == "batcherTick" {
			return
		}
		s = fmt.Sprintf("%s %+v", name, msg)
	}
	h.trace = append(h.trace, fmt.Sprintf("%12s  %-7s -> %-7s  %s", fmtVirtual(at), h.name(from), h.name(to), s))
}

func (h *scriptWorld) name(a actors.Address) string {
	if n, ok := h.names[a]; ok {
		return n
	}
	return fmt.Sprintf("%s/%d", a.Node, a.ID)
}

// fmtReply renders a Reply; the device that ran the request is named only
// where it is not the sender (a device answers for itself).
func (h *scriptWorld) fmtReply(from actors.Address, m actors.Reply) string {
	s := fmt.Sprintf("Reply %d %s", m.ID, m.Outcome)
	switch m.Outcome {
	case actors.Completed:
		q := h.reqs[m.ID]
		if m.Output != actors.EmulatedOutput(q.Model, q.Version, q.Input) {
			s += " WRONG-OUTPUT"
		}
		s += fmt.Sprintf(" size=%d", m.BatchSize)
	case actors.Rejected:
		s += " retry-after=" + fmtVirtual(m.RetryAfter)
	}
	if m.Attempts > 0 {
		s += fmt.Sprintf(" attempts=%d", m.Attempts)
	}
	if !m.Device.IsZero() && m.Device != from {
		s += " ran on " + h.name(m.Device)
	}
	if m.Err != "" {
		s += fmt.Sprintf(" %q", m.Err)
	}
	return s
}

// fmtBatchItems lists a batch's request IDs, with the attempt after a colon
// where it is not the first.
func fmtBatchItems(items []actors.Item) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = strconv.FormatUint(it.Req.ID, 10)
		if it.Attempt != 1 {
			parts[i] += fmt.Sprintf(":a%d", it.Attempt)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// fmtVirtual prints a virtual time in milliseconds, exact to the nanosecond
// and without trailing zeros: 25ms, 160.000001ms, 1200ms.
func fmtVirtual(d time.Duration) string {
	ms, ns := d/time.Millisecond, d%time.Millisecond
	if ns < 0 {
		return d.String()
	}
	if ns == 0 {
		return fmt.Sprintf("%dms", ms)
	}
	return strings.TrimRight(fmt.Sprintf("%d.%06d", ms, ns), "0") + "ms"
}

// scriptFault is one fault queued for a device's next job.
type scriptFault struct {
	kind   string
	frac   float64 // crash: when, as a fraction of the latency
	factor float64 // slow
	item   int     // item-error
}

// scriptedDevice is the executor of an interaction test's device: the
// simulator's device model, with faults taken from the script instead of
// drawn at random.
type scriptedDevice struct {
	model   *Device
	latency actors.LatencyModel
	next    []scriptFault
}

func (d *scriptedDevice) Run(now time.Duration, job actors.Job) (time.Duration, actors.JobDone, bool) {
	if len(d.next) == 0 {
		return d.model.Run(now, job)
	}
	f := d.next[0]
	d.next = d.next[1:]
	maxLen := 0
	for _, in := range job.Inputs {
		maxLen = max(maxLen, len(in))
	}
	latency := d.latency.Predict(len(job.Inputs), maxLen)
	switch f.kind {
	case "hang":
		return 0, actors.JobDone{}, true
	case "crash":
		return now + time.Duration(f.frac*float64(latency)), actors.JobDone{ID: job.ID, Fault: true}, false
	case "error":
		return now + latency, actors.JobDone{ID: job.ID, Err: ErrTextBatchFault}, false
	}
	done, res, hang := d.model.Run(now, job)
	switch f.kind {
	case "slow":
		done = now + time.Duration(f.factor*float64(done-now))
	case "item-error":
		if res.Err == "" && f.item < len(job.Inputs) {
			res.ItemErrs = make([]string, len(job.Inputs))
			res.ItemErrs[f.item] = ErrTextItemFault
			res.Outputs[f.item] = ""
		}
	}
	return done, res, hang
}
