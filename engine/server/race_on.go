//go:build race

package server

// raceBuild is whether the race detector is on.
const raceBuild = true
