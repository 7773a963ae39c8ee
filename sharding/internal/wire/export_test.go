package wire

// SplitEnvelope returns an envelope's head (type id and target) and its
// body, without the body's length prefix; nil, nil when b does not parse.
func SplitEnvelope(b []byte) (head, body []byte) {
	r := newReader(b)
	k := kindOf(TypeID(r.uvarint("id")))
	if k == nil {
		return nil, nil
	}
	if k.protocol {
		r.string("To.Type")
		r.byte("To.Flags")
	}
	headLen := r.off
	body = r.raw("body")
	if r.err != nil {
		return nil, nil
	}
	return b[:headLen], body
}
