package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestFidelityUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--net-delay", "soon"}, "--net-delay"},
		{[]string{"--warmup", "10s", "--duration", "10s"}, "--warmup"},
		{[]string{"--rate", "0"}, "--rate 0"},
		{[]string{"--duration", "1h"}, "at most 10m0s"},
		{[]string{"--target", "-1"}, "--target"},
		{[]string{"--crash-rate", "1"}, "--crash-rate"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--nodes", "0"}, "--nodes 0"},
		{[]string{"--nodes", "9"}, "--nodes 9"},
		{[]string{"--nodes", "3", "--crash-rate", "0.1"}, "fault-free"},
		{[]string{"--nodes", "3", "--config", "x.yaml"}, "embedded configuration"},
		{[]string{"--nodes", "3", "--link-latency", "-1ms"}, "--link-latency"},
	} {
		_, err := parseFidelity(c.args, io.Discard)
		if err == nil || !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	o, err := parseFidelity([]string{"--net-delay", "300us"}, io.Discard)
	if err != nil || o.cfg.NetDelay != 300*time.Microsecond || o.cfg.RateRPS != 800 || o.cfg.Devices != 4 {
		t.Errorf("defaults and --net-delay: %+v, %v", o, err)
	}
	if o, err := parseFidelity([]string{"--nodes", "3", "--devices", "2", "--link-latency", "1ms"}, io.Discard); err != nil || o.nodes != 3 || o.cfg.Devices != 2 || o.linkLatency != time.Millisecond {
		t.Errorf("--nodes 3: %+v, %v", o, err)
	}
	if o, _ := parseFidelity(nil, io.Discard); o.cfg.NetDelay >= 0 || o.nodes != 1 {
		t.Errorf("--net-delay auto became %v", o.cfg.NetDelay)
	}
}
