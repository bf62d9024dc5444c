package global

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// store is what the refresher asks of the shared store: redisStore (Redis
// or Valkey through go-redis) in use; the unit tests give a fake one, so
// that collect, consider, apply and the fallback run step by step without
// a server.
type store interface {
	// ask runs the lease script once for each keys[i] with args[i], in
	// one round trip, bounded by ctx; it writes each outcome to res[i].
	ask(ctx context.Context, keys []string, args []askArgs, res []askResult)
	// loadScript loads the lease script (after a NOSCRIPT).
	loadScript(ctx context.Context) error
	// ping checks the store answers.
	ping(ctx context.Context) error
	close() error
}

// askResult is one ask's outcome: the script's reply, or err; noScript
// when the store did not have the script (err is then set too).
type askResult struct {
	rep      reply
	err      error
	noScript bool
}

// redisStore is a store on a go-redis client. Every call into go-redis
// runs under recovered: a panic in it (a reply the bounds of bound.go let
// through and go-redis cannot take) is the call's error, counted by the
// client like any failed request, and the client is replaced by a new one
// (open), dropping the connection the panic left in whatever state. Only
// the refresher calls it.
type redisStore struct {
	rdb  redis.UniversalClient
	open func() redis.UniversalClient
	cmds []*redis.Cmd // reused by ask (one refresher)
	// panics counts the panics recovered.
	panics atomic.Uint64
}

// PanicError is a panic of go-redis, recovered.
type PanicError struct{ Value any }

func (e *PanicError) Error() string {
	return fmt.Sprintf("global: the store's client panicked (connection dropped): %v", e.Value)
}

// recovered, deferred, turns a panic into *err and replaces the client.
func (s *redisStore) recovered(err *error) {
	v := recover()
	if v == nil {
		return
	}
	s.panics.Add(1)
	*err = &PanicError{v}
	old := s.rdb
	s.rdb = s.open()
	clear(s.cmds)
	func() {
		defer func() { _ = recover() }()
		old.Close()
	}()
}

func (s *redisStore) ask(ctx context.Context, keys []string, args []askArgs, res []askResult) {
	var err error
	defer func() {
		if err != nil {
			for i := range res {
				res[i] = askResult{err: err}
			}
		}
	}()
	defer s.recovered(&err)
	pipe := s.rdb.Pipeline()
	s.cmds = s.cmds[:0]
	hash := script.Hash()
	for i := range keys {
		s.cmds = append(s.cmds, pipe.EvalSha(ctx, hash, scriptKeys(keys[i]), args[i].argv()...))
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range s.cmds {
		v, err := cmd.Result()
		var rep reply
		if err == nil {
			rep, err = parseReply(v)
		}
		res[i] = askResult{rep: rep, err: err, noScript: err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")}
	}
	clear(s.cmds)
}

// scriptKeys are the keys of one ask of key k (its KEYS): the hash and the
// sorted set of its hosts, in one slot (the hash tag of k).
func scriptKeys(k string) []string { return []string{k, k + ":h"} }

func (s *redisStore) loadScript(ctx context.Context) (err error) {
	defer s.recovered(&err)
	return script.Load(ctx, s.rdb).Err()
}

func (s *redisStore) ping(ctx context.Context) (err error) {
	defer s.recovered(&err)
	return s.rdb.Ping(ctx).Err()
}

func (s *redisStore) close() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{v}
		}
	}()
	return s.rdb.Close()
}
