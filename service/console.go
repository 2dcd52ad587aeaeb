package service

import (
	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/console"
)

// addConsole serves the security console (7.3) on srv's listener, the
// one of /v1/admin/*, when an admin token is configured (without one
// /console/ answers 404 like any unknown path), and samples the decision
// counters its overview shows.
func (l *limiter) addConsole(srv *api.Server) error {
	if l.cfg.AdminToken == "" {
		return nil
	}
	counters := console.NewCounters(l.reg)
	c, err := console.New(console.Options{AdminToken: l.cfg.AdminToken, API: srv, CheckToken: srv.CheckAdminToken, SignedIn: api.SignedIn, ForwardedTLS: srv.ForwardedTLS, Counters: counters,
		Logger: l.log.With("component", "console")})
	if err != nil {
		return err
	}
	l.g.add("console counters", componentFunc(counters.Run))
	srv.Handle("/console/", c)
	return nil
}
