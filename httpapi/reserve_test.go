package httpapi

import (
	"testing"

	"github.com/sluicelabs/sluice/checkapi"
)

// The wire type carries "reserve" ahead of holds; until this server can hold
// a cost, a reservation is refused rather than taken for good.
func TestReserveIsRefusedUntilHoldsExist(t *testing.T) {
	aerr := validateCheck(checkapi.Request{Route: "/a", Reserve: true})
	if aerr == nil || aerr.status != 400 || aerr.code != "invalid_request" {
		t.Fatalf("reserve answered %+v, want 400 invalid_request", aerr)
	}
	if aerr := validateCheck(checkapi.Request{Route: "/a"}); aerr != nil {
		t.Fatalf("a plain check refused: %v", aerr)
	}
}
