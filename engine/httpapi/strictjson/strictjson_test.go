package strictjson

import (
	"encoding/json"
	"reflect"
	"testing"
)

type flatBody struct {
	Input   *string         `json:"input"`
	Params  json.RawMessage `json:"params"`
	Async   bool            `json:"async"`
	skipped int
	Dash    string `json:"-"`
}

type nestedBody struct {
	Async bool `json:"async"`
	Items []struct {
		Input *string `json:"input"`
	} `json:"items"`
}

// TestKnownKeys: the strict fast path knows exactly the names encoding/json
// decodes into, and leaves bodies with nested structs to the Decoder.
func TestKnownKeys(t *testing.T) {
	got := knownKeys(reflect.TypeOf(flatBody{}))
	want := map[string]bool{"input": true, "params": true, "async": true}
	if !reflect.DeepEqual(got.names, want) || !got.flat {
		t.Errorf("flatBody: %v (flat %v), want %v, flat", got.names, got.flat, want)
	}
	if knownKeys(reflect.TypeOf(nestedBody{})).flat {
		t.Error("nestedBody is flat: its items are structs a strict Decoder checks")
	}
}

// TestDecodeRefuses: what the HTTP API must refuse, on either path.
func TestDecodeRefuses(t *testing.T) {
	for _, c := range []struct {
		body   string
		strict bool
	}{
		{`{"INPUT": "x"}`, false},                            // case-folded key
		{`{"input": "a", "input": "b"}`, false},              // repeated key
		{`{"items": [{"input": "a", "Input": "b"}]}`, false}, // nested, case-folded
		{`{"input": "x", "extra": 1}`, true},                 // unknown, strict
		{`{"input": "x"} {}`, false},                         // two values
		{"{\"input\": \"\xff\"}", false},                     // not UTF-8
		{``, false},
	} {
		for _, ref := range []bool{false, true} {
			var err error
			if ref {
				err = DecodeReference([]byte(c.body), new(nestedBody), c.strict)
				if err == nil {
					err = DecodeReference([]byte(c.body), new(flatBody), c.strict)
				}
			} else {
				err = Decode([]byte(c.body), new(flatBody), c.strict)
				if err == nil {
					err = Decode([]byte(c.body), new(nestedBody), c.strict)
				}
			}
			if err == nil {
				t.Errorf("%q (strict %v, reference %v): accepted", c.body, c.strict, ref)
			}
		}
	}
	var b flatBody
	if err := Decode([]byte(`{"input": "x", "extra": 1}`), &b, false); err != nil || *b.Input != "x" {
		t.Errorf("lenient decode with an extension key: %+v, %v", b, err)
	}
}
