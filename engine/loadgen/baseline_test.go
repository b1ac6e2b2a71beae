package loadgen

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer that a server's goroutine writes while
// the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBaselineServer: the hidden yardstick serves until its ctx ends.
func TestBaselineServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- ServeBaseline(ctx, "127.0.0.1:0", 0, out) }()
	deadline := time.Now().Add(10 * time.Second)
	var base string
	for base == "" && time.Now().Before(deadline) {
		base = regexp.MustCompile(`http://[0-9.:]+`).FindString(out.String())
		time.Sleep(5 * time.Millisecond)
	}
	if base == "" {
		cancel()
		t.Fatal("no baseline address")
	}
	resp, err := http.Post(base+"/v1/models/echo/infer", "application/json", strings.NewReader(`{"input":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("baseline: %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("baseline stop: %v", err)
	}
}
