package service

import (
	"errors"

	"github.com/tollgate-dev/tollgate/streams"
)

// checkNATS validates the --nats URL(s) and the files of --nats-ca and
// --nats-creds (7.5): a daemon given a credentials or CA file it cannot
// use exits 2 instead of retrying a connection that cannot succeed. An
// empty url (the limiter's embedded server) takes neither file.
func checkNATS(url string, auth streams.Auth) error {
	if url == "" {
		if auth != (streams.Auth{}) {
			return errors.New("service: --nats-ca and --nats-creds need --nats (the embedded server takes no credentials)")
		}
		return nil
	}
	if err := streams.ValidateURLs(url); err != nil {
		return err
	}
	return auth.Validate()
}
