//go:build !linux

package daemon

import (
	"context"
	"errors"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

type fastPath struct{}

func startFastpath(_ any, fc FastpathConfig, _ *policy.Compiled) (*fastPath, error) {
	if len(fc.Ifaces) == 0 {
		return nil, nil
	}
	return nil, &PartError{PartFastpath, errors.New("eBPF needs Linux")}
}
func (fp *fastPath) puntMark() uint32               { return 0 }
func (fp *fastPath) counts(string) (fastRule, bool) { return fastRule{}, false }
func (fp *fastPath) totalCounts(string) (shaper.TotalStats, bool) {
	return shaper.TotalStats{}, false
}
func (fp *fastPath) reload(*policy.Compiled) error { return nil }

type fpNext struct{}

func (fp *fastPath) prepare(*policy.Compiled) (*fpNext, error) { return nil, nil }
func (fp *fastPath) abort(*fpNext)                             {}
func (fp *fastPath) commit(*fpNext) error                      { return nil }
func (fp *fastPath) linkStatus() []control.FastpathLink        { return nil }
func (fp *fastPath) kernelMapsMiB() string                     { return "off" }
func (fp *fastPath) close()                                    {}
func (fp *fastPath) listFlows(context.Context, string, func(*control.Flow) error) error {
	return nil
}
