package testutil

import "testing"

// Must(f())(t) is f's value, the test failed at once (t.Fatal) when f
// returned an error: for the set-up calls, such as parsing and compiling
// a policy, without which a test cannot go on.
func Must[T any](v T, err error) func(t testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
