package sim

import "math/rand/v2"

// NewStream returns a random stream derived from a master seed and a name.
//
// Why named streams: if every consumer of randomness drew from one shared
// generator, adding a single draw anywhere (a new fault site, one more actor)
// would shift the numbers every later consumer sees, and a seed would stop
// meaning the same run. A stream per name keeps each consumer's numbers a
// function of (seed, name) alone.
//
// Derivation: state = splitmix64(seed) XOR fnv1a64(name); two more SplitMix64
// steps from that state give the two 64-bit words that seed a PCG generator.
// SplitMix64 spreads a one-bit change of the seed or the name over all bits
// of both words, so nearby seeds and similar names give unrelated streams.
//
// The same (seed, name) always gives a new *rand.Rand with the same
// sequence; two consumers that want independent numbers need two names.
func NewStream(seed uint64, name string) *rand.Rand {
	a, b := streamSeeds(seed, name)
	return rand.New(rand.NewPCG(a, b))
}

func streamSeeds(seed uint64, name string) (uint64, uint64) {
	x := seed
	state := splitmix64(&x) ^ fnv1aString(name)
	a := splitmix64(&state)
	b := splitmix64(&state)
	return a, b
}

// splitmix64 advances *x and returns the next SplitMix64 output (Steele,
// Lea, Flood 2014), the usual seeder for other generators.
func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func fnv1aString(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}
