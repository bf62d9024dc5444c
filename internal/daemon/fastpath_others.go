//go:build !linux

package daemon

import (
	"errors"

	"github.com/packetshaper/packetshaper/policy"
	"github.com/packetshaper/packetshaper/shaper"
)

type fastPath struct{}

func startFastpath(_ any, fc FastpathConfig, _ *policy.Compiled) (*fastPath, error) {
	if len(fc.Ifaces) == 0 {
		return nil, nil
	}
	return nil, errors.New("--fastpath: eBPF needs Linux")
}
func (fp *fastPath) puntMark() uint32                       { return 0 }
func (fp *fastPath) counts(string) (shaper.RuleStats, bool) { return shaper.RuleStats{}, false }
func (fp *fastPath) reload(*policy.Compiled) error          { return nil }
func (fp *fastPath) close()                                 {}
