package shaper

import (
	"errors"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
)

// TestConfigErrorTyped checks that limiter config errors say which
// settings they are about, with no package prefix, and that the engine
// adds its context with %w.
func TestConfigErrorTyped(t *testing.T) {
	cases := []struct {
		c    Config
		want Setting
	}{
		{Config{Rate: 10, Burst: 0.5}, SettingBurst},
		{Config{Rate: -1}, SettingRate},
		{Config{Rate: 0.5, Algorithm: FixedWindow, Window: 1e9}, SettingWindow},
		{Config{Rate: 10, MaxDelay: 1e6}, SettingMaxDelay},
		{Config{Rate: 1000, Bytes: true, Algorithm: SlidingWindow}, SettingAlgorithm},
		{Config{Rate: 10, Key: flows.KeyConfig{Symmetric: true, SrcPrefix4: 24}}, SettingSymmetric},
	}
	for _, tc := range cases {
		_, err := NewPolicy(Policy{Rules: []Rule{{Name: "r", Limit: tc.c}}})
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%+v: %v is not a *ConfigError", tc.c, err)
			continue
		}
		if len(ce.Settings) == 0 || ce.Settings[0] != tc.want {
			t.Errorf("%+v: settings %v, want %v first", tc.c, ce.Settings, tc.want)
		}
		if strings.Contains(ce.Msg, "shaper:") || strings.Contains(ce.Msg, "flows:") {
			t.Errorf("%+v: message with a package prefix: %q", tc.c, ce.Msg)
		}
	}
	if _, err := ParseBitrate("2 furlongs"); err == nil || strings.HasPrefix(err.Error(), "shaper:") {
		t.Errorf("ParseBitrate: %v", err)
	}
}
