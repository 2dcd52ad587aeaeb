// Package console is the security console (contract 7.3): HTML pages
// on the API listener, under /console/, for the people on call. It is
// server-rendered from templates and files embedded in the binary, with
// one small script of its own (live refresh) and no external assets.
//
// The console holds no admin logic of its own: every read and every
// change is a request to the admin API, made in process with the admin
// token and the operator's address, so a change made on a page is the
// same action as through the API (validated, audited, sticky). Sign-in
// checks the token as the API does and counts a wrong one in the API's
// failed-token throttle. Sessions live in the process (a restart signs
// everyone out); each carries a CSRF token that every change must echo.
package console
