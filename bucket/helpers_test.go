package bucket_test

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * 1e6})
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
