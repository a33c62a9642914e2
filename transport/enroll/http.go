package enroll

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/openstarry/openstarry-edge/core/jsonerr"
)

// maxRequest bounds an enrolment request.
const maxRequest = 16 << 10

// Handler serves POST /v1/enroll: a Request in, Credentials out, or
// {"error", "code"} with 400 (bad_request), 403 (bad_token,
// device_taken, not_a_device) or 502 (broker).
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/enroll", func(w http.ResponseWriter, r *http.Request) {
		var req Request
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, "bad_request", jsonerr.Describe("enrolment request", err))
			return
		}
		creds, err := h.Enroll(r.Context(), req)
		switch {
		case err == nil:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_ = json.NewEncoder(w).Encode(creds)
			return
		case errors.Is(err, ErrBadRequest):
			writeErr(w, http.StatusBadRequest, "bad_request", err.Error())
		case errors.Is(err, ErrBadToken):
			writeErr(w, http.StatusForbidden, "bad_token", err.Error())
		case errors.Is(err, ErrDeviceTaken):
			writeErr(w, http.StatusForbidden, "device_taken", err.Error())
		case errors.Is(err, ErrNotDevice):
			writeErr(w, http.StatusForbidden, "not_a_device", err.Error())
		default:
			writeErr(w, http.StatusBadGateway, "broker", err.Error())
		}
		h.Log.Warn().Err(err).Str("remote", r.RemoteAddr).Msg("hub: enrolment refused")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path+" (POST /v1/enroll)")
	})
	return mux
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
}
