package runtime

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// A ReplyTo's JSON is json.Marshal's of its address, byte for byte, and
// reads back as encoding/json reads it, whatever form it takes: the
// direct path changes no byte a node writes or accepts.
func TestReplyToJSONIsEncodingJSONs(t *testing.T) {
	for _, a := range []ReplyAddress{
		{},
		{Node: "shoal-1", Incarnation: 1, AskID: 42},
		{Node: "n", Incarnation: math.MaxUint64, AskID: math.MaxUint64},
		{Node: `quo"te\\back`, Incarnation: 3, AskID: 4},
		{Node: "<html>&", Incarnation: 5, AskID: 6},
		{Node: "naïve-ñode", Incarnation: 7, AskID: 8},
		{Node: "tab\there", Incarnation: 9, AskID: 10},
	} {
		got, err := ReplyTo[int]{addr: a}.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(a)
		if string(got) != string(want) {
			t.Errorf("%+v: MarshalJSON wrote %s, json.Marshal %s", a, got, want)
		}
		var back ReplyTo[int]
		if err := back.UnmarshalJSON(got); err != nil || back.addr != a {
			t.Errorf("%s reads back as %+v, %v; want %+v", got, back.addr, err, a)
		}
	}
	for _, in := range []string{
		`{"node":"a","incarnation":1,"id":2}`,
		`{"id":2,"node":"a","incarnation":1}`,
		`{ "node" : "a", "incarnation" : 1, "id" : 2 }`,
		`{"node":"a\u0062","incarnation":1,"id":2}`,
		`{"NODE":"a","incarnation":1,"id":2}`,
		`{"node":"a","incarnation":01,"id":2}`,
		`{"node":"a","incarnation":-1,"id":2}`,
		`{"node":"a","incarnation":18446744073709551616,"id":2}`,
		`{"node":"a","incarnation":1,"id":2}x`,
		"{\"node\":\"a\x01\",\"incarnation\":1,\"id\":2}",
		"{\"node\":\"\xff\",\"incarnation\":1,\"id\":2}",
		`{"node":"a","incarnation":1}`,
		`null`,
		`{"node":"a","incarnation":1.5,"id":2}`,
	} {
		var want ReplyAddress
		wantErr := json.Unmarshal([]byte(in), &want)
		var got ReplyTo[int]
		err := got.UnmarshalJSON([]byte(in))
		if (err != nil) != (wantErr != nil) || err == nil && !reflect.DeepEqual(got.addr, want) {
			t.Errorf("%s: read as %+v, %v; encoding/json reads %+v, %v", in, got.addr, err, want, wantErr)
		}
	}
}
