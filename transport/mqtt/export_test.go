package mqtt

import "time"

// SetCheckEvery sets how often the publish loop looks at waiting results;
// call it before Start.
func SetCheckEvery(c *Client, d time.Duration) { c.checkEvery = d }
