package schema

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validator collects mistakes in values, each with the path of its key and
// where the value came from, so one pass reports them all.
type Validator struct {
	// Src says where each key's value came from ("file.yaml:12", or a
	// flag), by path (Sources).
	Src map[string]string
	// Default names a value no key of Src holds (nor any key around it):
	// "(default)", or the file's name.
	Default string

	errs []FieldError
}

// Bad records a mistake at path. A key the file leaves out (a model's
// versions) is named with where its nearest enclosing key is.
func (v *Validator) Bad(path, format string, args ...any) {
	where := ""
	for p := path; where == "" && p != ""; p = Parent(p) {
		where = v.Src[p]
	}
	if where == "" {
		where = v.Default
	}
	line := 0
	if i := strings.LastIndexByte(where, ':'); i >= 0 {
		line, _ = strconv.Atoi(where[i+1:])
	}
	v.errs = append(v.errs, FieldError{Where: where, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Err returns the mistakes recorded, in line order, or nil.
func (v *Validator) Err() error {
	if len(v.errs) == 0 {
		return nil
	}
	errs := slices.Clone(v.errs)
	slices.SortStableFunc(errs, func(a, b FieldError) int { return a.Line - b.Line })
	return &Error{Fields: errs}
}

// Parent strips a path's last key or index: models[0].name → models[0]
// → models.
func Parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// IntIn checks lo <= x <= hi.
func (v *Validator) IntIn(path string, x, lo, hi int) {
	if x < lo || x > hi {
		v.Bad(path, "%d: want %d to %d", x, lo, hi)
	}
}

// DurIn checks lo <= d <= hi.
func (v *Validator) DurIn(path string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		v.Bad(path, "%v: want %v to %v", d, lo, hi)
	}
}

// Prob checks a probability.
func (v *Validator) Prob(path string, p float64) {
	if !(p >= 0 && p <= 1) { // also NaN
		v.Bad(path, "%v: want a probability in [0, 1]", p)
	}
}

// Finite checks lo <= x < +Inf.
func (v *Validator) Finite(path string, x, lo float64) {
	if !(x >= lo) || math.IsInf(x, 1) {
		v.Bad(path, "%v: want a finite number >= %v", x, lo)
	}
}
