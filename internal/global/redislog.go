package global

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SetRedisLogger sends go-redis's own log lines (such as "redis:
// connection pool: failed to dial after 5 attempts: ...") to log, at
// warning level, as one line each with msg "redis" and the text in err,
// instead of go-redis's plain-text lines on stderr. go-redis has one
// logger per process: the last call wins. A nil log is ignored.
func SetRedisLogger(log *slog.Logger) {
	if log == nil {
		return
	}
	redis.SetLogger(redisLog{log})
}

// redisLog adapts an slog.Logger to go-redis's logger.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	msg = strings.Join(strings.Fields(msg), " ") // one line
	l.log.WarnContext(ctx, "redis", "err", msg)
}
