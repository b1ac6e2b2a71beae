//go:build race

package rawtcp

// raceBuild is whether the race detector is on.
const raceBuild = true
