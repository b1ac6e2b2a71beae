package workerproc

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The tests' own worker: this test binary, run again with
// $WORKERPROC_TEST_WORKER set, speaks the worker side of the protocol in
// Go, so the tests need no Python and the benchmarks time batchd's side
// alone. What it does with a batch is keyed by its inputs:
//
//	ERR...       that item fails (a per-item error)
//	BATCHERR...  the whole batch fails (a batch error)
//	EXIT         the process exits (status 3) mid-batch
//	HANG         it never answers
//	GARBAGE      it writes bytes that are no frame
//	WRONGID      it answers with another batch id
//	WRONGCOUNT   it answers one item short
//	STDERR:text  it writes text to stderr first
//	PID          its output is its process id
//	EXITONCE:f   as EXIT if file f does not exist (it creates it), else echo
//	HANGONCE:f   as HANG if file f does not exist (it creates it), else echo
//
// and any other input is echoed. $WORKERPROC_TEST_WORKER=slow takes 2 ms
// a batch. $WORKERPROC_TEST_WORKER=fail-start exits
// before the handshake, saying why on stderr; =no-magic answers the
// handshake wrongly; =prints prints a line on its stdout first.
const testWorkerEnv = "WORKERPROC_TEST_WORKER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(testWorkerEnv); mode != "" {
		os.Exit(testWorker(mode))
	}
	os.Exit(m.Run())
}

func testWorker(mode string) int {
	if mode == "fail-start" {
		fmt.Fprintln(os.Stderr, "test worker: cannot load the model (as asked)")
		return 4
	}
	if mode == "prints" {
		fmt.Println("loading the model")
	}
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	fr := frameReader{r: in, max: FrameMaxBytesMax}
	var enc encoder
	send := func() {
		b, err := enc.end(FrameMaxBytesMax)
		if err != nil {
			panic(err)
		}
		out.Write(b)
		out.Flush()
	}
	typ, p, err := fr.next()
	if err != nil || typ != msgHello {
		fmt.Fprintln(os.Stderr, "test worker: no hello:", err)
		return 2
	}
	if _, err := decodeHello(p); err != nil {
		fmt.Fprintln(os.Stderr, "test worker:", err)
		return 2
	}
	if mode == "no-magic" {
		enc.begin(msgHelloAck)
		enc.bytes("not-a-worker")
		enc.u32(ProtocolVersion)
		enc.bytes("")
	} else {
		enc.helloAck(helloAck{Version: ProtocolVersion, Info: "go test worker"})
	}
	send()
	items := make([]itemResult, 0, 128)
	for {
		typ, p, err := fr.next()
		if err != nil {
			return 0 // stdin closed: the end
		}
		if typ != msgBatch {
			fmt.Fprintln(os.Stderr, "test worker: type", typ)
			return 2
		}
		m, err := decodeBatch(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "test worker:", err)
			return 2
		}
		if mode == "slow" {
			time.Sleep(2 * time.Millisecond)
		}
		id, n := m.ID, len(m.Inputs)
		items = items[:0]
		batchErr := ""
		for _, x := range m.Inputs {
			s := string(x)
			switch {
			case s == "EXIT":
				fmt.Fprintln(os.Stderr, "test worker: exiting mid-batch (as asked)")
				return 3
			case s == "HANG":
				time.Sleep(time.Hour)
			case s == "GARBAGE":
				out.WriteString("this is not a frame\n")
				out.Flush()
				time.Sleep(time.Hour) // batchd must not wait for more
			case s == "WRONGID":
				id++
			case s == "WRONGCOUNT":
				n--
			case strings.HasPrefix(s, "EXITONCE:") && firstTime(s[len("EXITONCE:"):]):
				fmt.Fprintln(os.Stderr, "test worker: exiting mid-batch once (as asked)")
				return 3
			case strings.HasPrefix(s, "HANGONCE:") && firstTime(s[len("HANGONCE:"):]):
				time.Sleep(time.Hour)
			case strings.HasPrefix(s, "STDERR:"):
				fmt.Fprintln(os.Stderr, s[len("STDERR:"):])
			case strings.HasPrefix(s, "BATCHERR"):
				batchErr = "poison " + s
			}
			switch {
			case strings.HasPrefix(s, "ERR"):
				items = append(items, itemResult{Err: true, Data: []byte("bad item " + s)})
			case s == "PID":
				items = append(items, itemResult{Data: fmt.Appendf(nil, "%d", os.Getpid())})
			default:
				items = append(items, itemResult{Data: x})
			}
		}
		if batchErr != "" {
			enc.batchError(id, batchErr)
		} else {
			enc.result(id, items[:max(n, 0)])
		}
		send()
	}
}

// firstTime creates the file at path and reports whether it did (false:
// it was there).
func firstTime(path string) bool {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// testCmd is the command that runs the tests' worker in mode.
func testCmd(t testing.TB) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "-test.run=^$"}
}
