package shaper

import "fmt"

// Setting names one setting of a Config (or LimiterConfig), for
// ConfigError: the rule file and the command line map it to their own
// field or flag.
type Setting uint8

// The settings a ConfigError can be about.
const (
	SettingNone Setting = iota
	// SettingRate is Rate: a rule's pps or bitrate.
	SettingRate
	SettingBurst
	SettingAlgorithm
	SettingWindow
	SettingShape
	SettingMaxDelay
	// SettingKey is the key mode; SettingPrefix the four prefix lengths.
	SettingKey
	SettingPrefix
	SettingSymmetric
	SettingMaxFlows
	SettingFlowTimeout
	SettingGlobal
	SettingGlobalSlack
	SettingVerdict
	// SettingMarkMask is the key's mark mask (flows.KeyConfig.MarkMask).
	SettingMarkMask
)

// ConfigError is a problem with a limiter's settings. Settings are the
// settings at odds, the one most to blame first (none: the limit as a
// whole, that is its rate); Msg says what is wrong, without a package
// prefix. Context (the package, the rule) is added by the caller with %w.
type ConfigError struct {
	Settings []Setting
	Msg      string
}

func (e *ConfigError) Error() string { return e.Msg }

// configErr makes a *ConfigError about settings.
func configErr(settings []Setting, format string, args ...any) error {
	return &ConfigError{Settings: settings, Msg: fmt.Sprintf(format, args...)}
}

// about lists settings, for configErr.
func about(s ...Setting) []Setting { return s }
