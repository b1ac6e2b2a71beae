//go:build !linux

package fastlane

import "errors"

// parker parks connections on Linux only (epoll); elsewhere each keeps
// its goroutine.
type parker struct{}

func newParker() (*parker, error) { return nil, errors.New("parking idle connections needs Linux") }

func (p *parker) add(*conn)                     {}
func (p *parker) arm(*conn) bool                { return false }
func (p *parker) forget(*conn, uint64)          {}
func (p *parker) parked() int                   { return 0 }
func (p *parker) run(func(*conn), func()) error { return nil }
func (p *parker) close()                        {}
