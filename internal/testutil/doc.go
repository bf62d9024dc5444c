// Package testutil holds the helpers the project's tests share, declared
// once: SyncBuffer (a goroutine-safe buffer for captured logs and output),
// WaitFor and Eventually (waiting on a condition, never a fixed sleep),
// network namespaces (NewNetns, RunIn, Do, Unshare) and real redis-server
// processes (StartRedis, StartRedisTLS), the module's string literals
// (Literals, for the tests that hold a name to few files), the exact
// token bucket the limit tests count against (ExactTokenBucket), Must
// for set-up calls a test cannot go on without, PolicyRule (a policy's
// [[rule]] table) and Receive (a datagram reader's goroutine).
//
// It is a normal package so that every package's tests can import it, but
// it is for tests only: only _test.go files import it (TestOnlyTestsImport
// checks), and it imports the testing package.
package testutil
