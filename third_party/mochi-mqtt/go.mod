module github.com/mochi-mqtt/server/v2

go 1.21

require (
	github.com/gorilla/websocket v1.5.0
	github.com/rs/xid v1.4.0
	go.etcd.io/bbolt v1.3.5
)

require golang.org/x/sys v0.0.0-20200202164722-d101bd2416d5 // indirect
