package mqtt

import "time"

// Opener is the connection opener the client uses, for the benchmark's
// bare subscriber.
var Opener = opener

// SetCheckEvery sets how often the publish loop looks at waiting results;
// call it before Start.
func SetCheckEvery(c *Client, d time.Duration) { c.checkEvery = d }
