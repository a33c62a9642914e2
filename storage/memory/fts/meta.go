package fts

import "encoding/json"

func encodeMeta(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

func decodeMeta(s string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, errMeta
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}
