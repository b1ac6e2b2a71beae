package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/httpapi"
)

// corpusBodyMaxBytes and corpusInputMaxBytes are the corpus servers'
// limits: small, so that the cases over them stay small files.
const (
	corpusBodyMaxBytes  = 64 << 10
	corpusInputMaxBytes = 1 << 10
)

// TestMalformedCorpus sends every request of testdata/malformed (see
// corpus_test.go for the format) over its own TCP connection to the real
// handler on the real engine, and checks that each is answered with the
// status it names, a 4xx, in the error envelope of its route with a
// (status, code) pair the package doc's table lists; or, for framing
// net/http refuses before the handler runs, its plain 400 or 431. Then the
// same server must still serve a valid request.
//
// The corpus goes to the server twice: as net/http serves it, and behind
// engine/fastlane, which must answer each case as net/http's server does
// (serving the plain ones itself, handing the others over).
func TestMalformedCorpus(t *testing.T) {
	for _, lane := range []bool{false, true} {
		t.Run(map[bool]string{false: "net_http", true: "lane"}[lane], func(t *testing.T) { malformedCorpus(t, lane) })
	}
}

func malformedCorpus(t *testing.T, lane bool) {
	cases, err := httpapi.LoadCorpus("testdata/malformed")
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedCodes(t)
	registry := []actors.ModelConfig{{Name: "echo", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}}}
	hc := httpapi.DefaultConfig()
	hc.Models = registry
	hc.BodyMaxBytes, hc.InputMaxBytes = corpusBodyMaxBytes, corpusInputMaxBytes
	ec := engineConfig()
	ec.Batcher.Models = registry
	servers := map[string]*live{"": startLiveOn(t, ec, hc, lane)}
	hc.APIKeys = []httpapi.APIKey{{Key: "corpus-key", Tenant: "alice", Models: []string{"echo"}}}
	servers["keyed"] = startLiveOn(t, ec, hc, lane)

	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			l := servers[c.Server]
			if l == nil {
				t.Fatalf("server %q: want none or keyed", c.Server)
			}
			if c.Status < 400 || c.Status > 499 {
				t.Fatalf("the case wants %d: the corpus is of client errors, 4xx", c.Status)
			}
			resp, body := sendRaw(t, l.srv.Listener.Addr().String(), c)
			if resp.StatusCode != c.Status {
				t.Fatalf("status %d, want %d; body %q", resp.StatusCode, c.Status, truncated(body))
			}
			if c.Code == "net/http" {
				// Refused by net/http before any handler: plain text.
				if c.Status != http.StatusBadRequest && c.Status != http.StatusRequestHeaderFieldsTooLarge {
					t.Errorf("net/http answers framing with 400 or 431, not %d", c.Status)
				}
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if c.Code == "" { // /v2: {"error": "message"}
				var env struct {
					Error *string `json:"error"`
				}
				if err := dec.Decode(&env); err != nil || env.Error == nil || *env.Error == "" {
					t.Fatalf("body %q is not the /v2 envelope: %v", truncated(body), err)
				}
				return
			}
			var env struct {
				Error *struct {
					Code         string `json:"code"`
					Message      string `json:"message"`
					RetryAfterMs int64  `json:"retry_after_ms"`
				} `json:"error"`
			}
			if err := dec.Decode(&env); err != nil || env.Error == nil || env.Error.Message == "" {
				t.Fatalf("body %q is not the /v1 envelope: %v", truncated(body), err)
			}
			if env.Error.Code != c.Code {
				t.Errorf("code %q (%s), want %q", env.Error.Code, env.Error.Message, c.Code)
			}
			if !documented[env.Error.Code][resp.StatusCode] {
				t.Errorf("%d %s is not in the package doc's status table", resp.StatusCode, env.Error.Code)
			}
		})
	}
	for name, l := range servers {
		var auth []string
		if name == "keyed" {
			auth = []string{"Authorization", "Bearer corpus-key"}
		}
		code, out := validInfer(t, l, auth)
		if code != http.StatusOK || out != actors.EmulatedOutput("echo", "v1", "still here") {
			t.Errorf("server %q after the corpus: %d %q, want 200 with the echo's output", name, code, out)
		}
	}
}

// sendRaw writes c's request on a new connection and reads the answer;
// the write runs beside the read, so an answer given before the whole
// request is read (413, 431) is still read.
func sendRaw(t *testing.T, addr string, c httpapi.CorpusCase) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitMax))
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		// A write error is the server hanging up on a request it has
		// answered already; the answer is what is checked.
		if _, err := conn.Write(c.Request); err == nil && c.CloseWrite {
			_ = conn.(*net.TCPConn).CloseWrite()
		}
	})
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp, body
}

// validInfer sends one valid infer to l.
func validInfer(t *testing.T, l *live, hdr []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", l.srv.URL+"/v1/models/echo/infer", strings.NewReader(`{"input": "still here"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := l.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a inferAnswer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a.Output
}

// documentedCodes reads the status table of the package doc (doc.go):
// code → the statuses it is listed with. A row's code column is
// characters 8 to 43 after the comment's tab; a row that starts with
// spaces continues the status above it.
func documentedCodes(t *testing.T) map[string]map[int]bool {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(src), "//\tstatus  code")
	if !ok {
		t.Fatal("doc.go: no status table")
	}
	out := map[string]map[int]bool{}
	status := 0
	row := regexp.MustCompile(`^//\t(\d{3}| {3}) {5}(.*)$`)
	for _, line := range strings.Split(table, "\n")[1:] {
		m := row.FindStringSubmatch(line)
		if m == nil {
			break // the table ends at the first line that is not a row
		}
		if m[1] != "   " {
			status, _ = strconv.Atoi(m[1])
		}
		col := m[2]
		if len(col) > 35 {
			col = col[:35]
		}
		for code := range strings.SplitSeq(strings.TrimSpace(col), ",") {
			if code = strings.TrimSpace(code); code != "" {
				if out[code] == nil {
					out[code] = map[int]bool{}
				}
				out[code][status] = true
			}
		}
	}
	if !out["bad_request"][400] || !out["unsupported_media_type"][415] || !out["draining"][503] {
		t.Fatalf("doc.go's status table read wrong: %v", out)
	}
	return out
}

func truncated(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
