package gateway

import "time"

// SetAuthLogClock sets the clock of g's throttle of refused-credential
// records, so a test can pass its window without waiting.
func SetAuthLogClock(g *Gateway, now func() time.Time) { g.authLog.throttle.Now = now }
