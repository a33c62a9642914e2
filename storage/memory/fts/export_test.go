package fts

import (
	"context"
	"fmt"
)

func SetUserVersion(path string, v int) error {
	e, err := Open(context.Background(), path, "default")
	if err != nil {
		return err
	}
	defer e.Close()
	_, err = e.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", v))
	return err
}
