package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Resolver is the DNS a node joins by; net.DefaultResolver is one (tests
// give a fake).
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// SRVPrefix marks a Join entry to resolve by SRV: "srv+NAME" looks up
// NAME's SRV records (a Kubernetes headless service's named port:
// "_gossip._tcp.batchd.default.svc.cluster.local") and joins each
// target's addresses at the record's port.
const SRVPrefix = "srv+"

// resolveTimeout bounds one resolution of the Join list.
const resolveTimeout = 5 * time.Second

// ResolveJoin turns Join entries into memberlist addresses: an IP:port
// stays as it is, a name:port becomes each of its A and AAAA addresses
// at port, an SRVPrefix entry each SRV target's addresses at the
// target's port; an IP or a name without a port takes defaultPort.
// Duplicates go; at most JoinMax addresses come back. An entry that does
// not resolve is skipped; only an error when none does.
func ResolveJoin(ctx context.Context, r Resolver, entries []string, defaultPort int) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(host, port string) {
		a := net.JoinHostPort(host, port)
		if !seen[a] && len(out) < JoinMax {
			seen[a] = true
			out = append(out, a)
		}
	}
	hosts := func(host, port string) error {
		if net.ParseIP(host) != nil {
			add(host, port)
			return nil
		}
		ips, err := r.LookupHost(ctx, host)
		if err != nil {
			return err
		}
		for _, ip := range ips {
			add(ip, port)
		}
		return nil
	}
	var errs []string
	for _, e := range entries {
		if name, ok := strings.CutPrefix(e, SRVPrefix); ok {
			_, srvs, err := r.LookupSRV(ctx, "", "", name)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			for _, s := range srvs {
				if err := hosts(strings.TrimSuffix(s.Target, "."), strconv.Itoa(int(s.Port))); err != nil {
					errs = append(errs, err.Error())
				}
			}
			continue
		}
		host, port, err := net.SplitHostPort(e)
		if err != nil {
			host, port = strings.Trim(e, "[]"), strconv.Itoa(defaultPort)
		}
		if err := hosts(host, port); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(out) == 0 && len(entries) > 0 {
		return nil, fmt.Errorf("cluster: no join address resolved: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// rejoin resolves the Join list every period and joins the addresses that
// are not members yet, until stop closes: nodes that start together find
// each other once the service lists them, and a node cut off at start
// (the service empty, or only itself in it) joins later.
func (m *Membership) rejoin(r Resolver, entries []string, port int, period time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		addrs, err := ResolveJoin(ctx, r, entries, port)
		cancel()
		if err != nil {
			continue
		}
		members := map[string]bool{}
		for _, n := range m.ml.Members() {
			members[net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))] = true
		}
		var fresh []string
		for _, a := range addrs {
			if !members[a] {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) > 0 {
			_, _ = m.ml.Join(fresh) // what fails is tried again next period
		}
	}
}
