package httpapi

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The malformed-input corpus: testdata/malformed/*.txt, one raw HTTP
// request per file and the answer it must get. TestMalformedCorpus (in
// malformed_test.go) sends each over a plain TCP connection to the real
// handler on the real engine; FuzzDecodeInfer seeds from their bodies. A
// file is:
//
//	# why the case is here (any number of comment lines)
//	want: 415 unsupported_media_type
//	server: keyed                    (optional: the server with API keys)
//	raw: true                        (optional: no Content-Length added)
//	close-write: true                (optional: half-close after sending)
//
//	POST /v1/models/echo/infer HTTP/1.1
//	Host: batchd
//	Content-Type: text/plain
//
//	{"input": "a"}
//
// want is the status and the error code of the /v1 envelope; a /v2 path
// names the status alone (its envelope has no code), and "net/http" in
// place of the code says net/http answers before the handler runs, in
// plain text (framing it cannot parse). The request's head lines are sent
// with CRLF; its body is the rest of the file less its last newline; a
// Content-Length is added to a request with a body unless raw. In head
// and body, {{repeat N TEXT}} stands for TEXT N times (TEXT hex:7D for
// bytes given in hex, such as the '}' TEXT cannot hold) and {{hex 0A FF}}
// for those bytes, so sizes and invalid bytes stay readable here.

// CorpusCase is one file of the corpus.
type CorpusCase struct {
	Name       string
	Status     int
	Code       string // "" for /v2; "net/http" for net/http's own answer
	Server     string // "" or "keyed"
	CloseWrite bool
	Request    []byte // the whole request, as sent
	Body       []byte // its body alone
}

// corpusExpansion is a {{...}} in a case's request.
var corpusExpansion = regexp.MustCompile(`\{\{(repeat|hex) ([^}]*)\}\}`)

// corpusRepeatMax bounds a {{repeat}}: the corpus tests limits, it must
// not become one.
const corpusRepeatMax = 1 << 20

func expandCorpus(s string) ([]byte, error) {
	var err error
	out := corpusExpansion.ReplaceAllStringFunc(s, func(m string) string {
		sub := corpusExpansion.FindStringSubmatch(m)
		switch sub[1] {
		case "repeat":
			n, text, _ := strings.Cut(sub[2], " ")
			if h, ok := strings.CutPrefix(text, "hex:"); ok {
				b, e := hex.DecodeString(h)
				if e != nil {
					err = fmt.Errorf("%s: %w", m, e)
					return ""
				}
				text = string(b)
			}
			k, e := strconv.Atoi(n)
			if e != nil || k < 0 || k*len(text) > corpusRepeatMax {
				err = fmt.Errorf("%s: want {{repeat N TEXT}}, at most %d bytes", m, corpusRepeatMax)
				return ""
			}
			return strings.Repeat(text, k)
		default:
			b, e := hex.DecodeString(strings.ReplaceAll(sub[2], " ", ""))
			if e != nil {
				err = fmt.Errorf("%s: %w", m, e)
			}
			return string(b)
		}
	})
	return []byte(out), err
}

// LoadCorpus reads every case in dir.
func LoadCorpus(dir string) ([]CorpusCase, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("corpus: no cases in %s", dir)
	}
	var out []CorpusCase
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		c, err := parseCorpusCase(filepath.Base(p), string(data))
		if err != nil {
			return nil, fmt.Errorf("corpus: %s: %w", p, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func parseCorpusCase(name, text string) (CorpusCase, error) {
	c := CorpusCase{Name: strings.TrimSuffix(name, ".txt")}
	directives, request, ok := strings.Cut(text, "\n\n")
	if !ok {
		return c, fmt.Errorf("no blank line between the directives and the request")
	}
	raw := false
	for _, line := range strings.Split(directives, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			return c, fmt.Errorf("directive %q: want key: value", line)
		}
		switch k {
		case "want":
			st, code, _ := strings.Cut(v, " ")
			n, err := strconv.Atoi(st)
			if err != nil {
				return c, fmt.Errorf("want %q: want STATUS [CODE]", v)
			}
			c.Status, c.Code = n, code
		case "server":
			c.Server = v
		case "raw":
			raw = v == "true"
		case "close-write":
			c.CloseWrite = v == "true"
		default:
			return c, fmt.Errorf("unknown directive %q", k)
		}
	}
	if c.Status == 0 {
		return c, fmt.Errorf("no want: directive")
	}
	head, body, _ := strings.Cut(request, "\n\n")
	body = strings.TrimSuffix(body, "\n")
	h, err := expandCorpus(head)
	if err != nil {
		return c, err
	}
	b, err := expandCorpus(body)
	if err != nil {
		return c, err
	}
	lines := strings.Split(string(h), "\n")
	lower := strings.ToLower(string(h))
	if !raw && len(b) > 0 && !strings.Contains(lower, "\ncontent-length:") && !strings.Contains(lower, "\ntransfer-encoding:") {
		lines = append(lines, "Content-Length: "+strconv.Itoa(len(b)))
	}
	var req bytes.Buffer
	for _, l := range lines {
		req.WriteString(l + "\r\n")
	}
	req.WriteString("\r\n")
	req.Write(b)
	c.Request, c.Body = req.Bytes(), b
	return c, nil
}
