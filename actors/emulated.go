package actors

import (
	"encoding/binary"
	"strconv"
)

// EmulatedOutput is the output of the emulated backend (the seeds'
// batchstring) for one input. It is a checkable function of the input, the
// model and the version, so a reply that carries another request's output,
// or the right input run on the wrong model version, is detected. Every
// runtime's emulated backend and every checker use this one function.
func EmulatedOutput(model, version, input string) string {
	var buf [16]byte
	return model + "@" + version + ":" + string(strconv.AppendUint(buf[:0], InputHash(input), 16))
}

// InputHash is a 64-bit hash of an input, the part of EmulatedOutput that
// depends on it; a checker can keep it instead of the input. It is FNV-1a's
// step taken a word at a time, with a fold of the high bits after each
// multiply: byte-at-a-time FNV was a tenth of a simulation's time.
func InputHash(input string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037) ^ uint64(len(input))
	i := 0
	for ; i+8 <= len(input); i += 8 {
		h = (h ^ binary.LittleEndian.Uint64([]byte(input[i:i+8]))) * prime
		h ^= h >> 32
	}
	for ; i < len(input); i++ {
		h = (h ^ uint64(input[i])) * prime
	}
	return h ^ h>>29
}

// EmulatedOutputMatches reports whether out == EmulatedOutput(model,
// version, input) for an input whose InputHash is inputHash, without
// building the expected string.
func EmulatedOutputMatches(out, model, version string, inputHash uint64) bool {
	at, colon := len(model), len(model)+1+len(version)
	if len(out) <= colon+1 || out[:at] != model || out[at] != '@' ||
		out[at+1:colon] != version || out[colon] != ':' {
		return false
	}
	// The tail is inputHash in lowercase hex without leading zeros, as
	// strconv.AppendUint writes it: compared digit by digit from the end.
	tail := out[colon+1:]
	n := 1
	for h := inputHash >> 4; h != 0; h >>= 4 {
		n++
	}
	if len(tail) != n {
		return false
	}
	for i := n - 1; i >= 0; i-- {
		if tail[i] != hexDigits[inputHash&15] {
			return false
		}
		inputHash >>= 4
	}
	return true
}

const hexDigits = "0123456789abcdef"
