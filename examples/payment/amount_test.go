package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// decodeAmountWithDecoder is decodeAmount as first written, on a
// json.Decoder's tokens: the reference the hand-written parser must agree
// with, input for input.
func decodeAmountWithDecoder(r io.Reader) (int64, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, errBody
	}
	var amount *int64
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0, errBody
		}
		name, _ := tok.(string)
		if seen[name] {
			return 0, fmt.Errorf("%w: duplicate field %q", errBody, name)
		}
		seen[name] = true
		if name != "amount" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return 0, errBody
			}
			continue
		}
		if err := dec.Decode(&amount); err != nil {
			return 0, errBody
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return 0, errBody
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("%w: data after the object", errBody)
	}
	if amount == nil {
		return 0, errBody
	}
	return *amount, nil
}

var amountBodies = []string{
	`{"amount":1000}`, " {\"amount\":1000} \n", "\t{\r\n\"amount\" : 42 }\r\n",
	`{"amount":1000}xyz`, `{"amount":1000}{}`, `{"amount":1000} 1`, `{"amount":1000}]`,
	`{"AMOUNT":1000}`, `{"Amount":1000}`, `{"amou\u006et":7}`, `{"amount\u0000":7}`,
	`{"amount":1000,"amount":5}`, `{"amount":5,"note":1,"note":2}`, `{"n\u006fte":1,"note":2,"amount":3}`,
	`{"amount":1,"amount":2}xyz`, `{"a":1,"a":[}`, `{"amount":"x","note":1,"note":2}`,
	`{"amount":null}`, `{"amount":null,"x":1}`, `{"amount":1e3}`, `{"amount":1.0}`, `{"amount":-0}`, `{"amount":-5}`,
	`{"amount":01}`, `{"amount":+1}`, `{"amount":9223372036854775807}`, `{"amount":9223372036854775808}`,
	`{"amount":-9223372036854775808}`, `{"amount":"1000"}`, `{"amount":true}`, `{"amount":{}}`, `{"amount":[1]}`,
	`[1000]`, `{"amount":1000`, `{"amount":1000,}`, `{,"amount":1}`, `{"amount" 1}`, `{"amount":}`, `{"amount"}`,
	`{amount:1}`, `{'amount':1}`, `{"amount":1 "x":2}`, `{"amount":10 00}`, ``, ` `, `{`, `}`, `{}`, `null`, `"amount"`,
	`{"note":"x","amount":1000}`, `{"note":"a\"b}","amount":1}`, `{"note":"\q","amount":1}`, `{"note":"\u12","amount":1}`,
	"{\"note\":\"tab\there\",\"amount\":1}", `{"note":{"a":[1,{"b":"]}"}],"c":null},"amount":2}`, `{"note":[1,2}],"amount":2}`,
	`{"note":tru,"amount":1}`, `{"note":truex,"amount":1}`, `{"note":nul,"amount":1}`, `{"note":-,"amount":1}`,
	"{\"\xff\":1,\"\xfe\":2,\"amount\":1}", "{\"note\":\"\xff\",\"amount\":1}", "{\"amount\":1}\x00",
	`{"note":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `,"amount":1}`,
	`{"note":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `,"amount":1}`,
	`{"amount":1,"x":"` + strings.Repeat("y", maxSettleBody) + `"}`,
	`{"amount":1}` + strings.Repeat(" ", maxSettleBody),
	manyFields(12, ""), manyFields(12, "f3"), manyFields(12, "f10"), manyFields(8, "f7"), manyFields(9, "f8"),
}

// manyFields is an object of n fields f0, f1, …, then dup again unless it
// is empty, then the amount.
func manyFields(n int, dup string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, `"f%d":%d,`, i, i)
	}
	if dup != "" {
		fmt.Fprintf(&b, `%q:0,`, dup)
	}
	b.WriteString(`"amount":1}`)
	return b.String()
}

// The hand-written parser answers every body as the decoder-based one did:
// the same amount, or an error with the same message.
func TestDecodeAmountAgreesWithTheDecoder(t *testing.T) {
	for _, body := range amountBodies {
		checkAmountAgrees(t, body)
	}
}

func FuzzDecodeAmountAgreesWithTheDecoder(f *testing.F) {
	for _, body := range amountBodies {
		f.Add(body)
	}
	f.Fuzz(checkAmountAgrees)
}

func checkAmountAgrees(t *testing.T, body string) {
	limited := func() io.Reader { return io.LimitReader(strings.NewReader(body), maxSettleBody) }
	want, wantErr := decodeAmountWithDecoder(limited())
	got, gotErr := decodeAmount(strings.NewReader(body))
	if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("body %.200q: got (%d, %v), want (%d, %v)", body, got, gotErr, want, wantErr)
	}
}

// A body that breaks off with a read error is refused, as a decoder
// reading the stream refuses it.
func TestDecodeAmountRefusesABodyCutByAReadError(t *testing.T) {
	broken := errors.New("connection reset")
	for _, body := range []string{`{"amount":1000}`, `{"amount":10`} {
		r := io.MultiReader(strings.NewReader(body), &failingReader{broken})
		want, wantErr := decodeAmountWithDecoder(io.MultiReader(strings.NewReader(body), &failingReader{broken}))
		got, err := decodeAmount(r)
		if !errors.Is(err, errBody) || got != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("body %q cut by a read error: got (%d, %v), want (%d, %v)", body, got, err, want, wantErr)
		}
	}
}

type failingReader struct{ err error }

func (r *failingReader) Read([]byte) (int, error) { return 0, r.err }

// BenchmarkDecodeAmount measures a settle body's parsing.
func BenchmarkDecodeAmount(b *testing.B) {
	body := []byte(`{"amount":1000}`)
	for _, bc := range []struct {
		name   string
		decode func(io.Reader) (int64, error)
	}{{"parser", decodeAmount}, {"decoder", decodeAmountWithDecoder}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var r bytes.Reader
			for b.Loop() {
				r.Reset(body)
				if n, err := bc.decode(&r); err != nil || n != 1000 {
					b.Fatal(n, err)
				}
			}
		})
	}
}
