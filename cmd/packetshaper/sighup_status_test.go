package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/testutil"
)

// TestSIGHUPWithoutPolicyNotCounted: without --policy, a SIGHUP is logged
// and ignored: it is no reload, so the status (and the metrics, which read
// the same record: packetshaper_reloads_total, last_reload_successful)
// count no failed reload and keep no last reload.
func TestSIGHUPWithoutPolicyNotCounted(t *testing.T) {
	_, nsFd := netnsUDP(t, 7)
	var st *control.Status
	code, log := runLiveDriven(t, nsFd, []string{"--queue", "7", "--pps", "10", "--stats-interval", "0"}, func(log *testutil.SyncBuffer, sock string) error {
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		if err := waitLog(log, "nothing to reload", 1); err != nil {
			return err
		}
		var err error
		if st, err = control.GetStatus(sock); err != nil {
			return err
		}
		if st.Reloads.Failed != 0 || st.Reloads.OK != 0 || st.Reloads.Last != nil {
			return fmt.Errorf("after a SIGHUP without --policy the status counts reloads: %+v (last %+v)", st.Reloads, st.Reloads.Last)
		}
		return nil
	})
	if code != 0 {
		t.Fatalf("runLive = %d, want 0\nlog:\n%s", code, log)
	}
	if !strings.Contains(log, "ignored") || strings.Contains(log, "level=ERROR") {
		t.Errorf("log:\n%s", log)
	}
}
