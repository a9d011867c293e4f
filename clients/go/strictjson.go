package budgetagent

// Decoding JSON as strictly as the Rust agent's serde types: encoding/json alone accepts
// null for any field, matches member names case-insensitively, keeps the last of duplicate
// members and turns broken UTF-16 escapes into U+FFFD, so a config the Rust agent refuses
// could pass here.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// decodeError is a config value that does not fit, located by its path in the document
// (e.g. `chains.checkout.segments[1].class`).
type decodeError struct {
	path, msg string
}

func (e *decodeError) Error() string {
	if e.path == "" {
		return e.msg
	}
	return e.path + ": " + e.msg
}

// at locates err under the member or index name; nil stays nil.
func at(name string, err error) error {
	if err == nil {
		return nil
	}
	var inner *decodeError
	if !errors.As(err, &inner) {
		return &decodeError{path: name, msg: err.Error()}
	}
	switch {
	case inner.path == "":
		return &decodeError{path: name, msg: inner.msg}
	case inner.path[0] == '[':
		return &decodeError{path: name + inner.path, msg: inner.msg}
	default:
		return &decodeError{path: name + "." + inner.path, msg: inner.msg}
	}
}

// object is one JSON object's members: every one in document order, and by name.
type object struct {
	list    []member
	members map[string]json.RawMessage
}

type member struct {
	name string
	raw  json.RawMessage
}

// readObject splits a JSON object into its members. Like serde, a struct refuses a member
// given twice; a map (duplicates true) lists both, and the last one wins by name.
func readObject(data []byte, duplicates bool) (object, error) {
	if k := kindOf(data); k != "an object" {
		return object{}, fmt.Errorf("expected an object, found %s", k)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return object{}, err
	}
	o := object{members: map[string]json.RawMessage{}}
	for dec.More() {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return object{}, err
		}
		if loneSurrogate(data[before:dec.InputOffset()]) {
			return object{}, errors.New("invalid unicode escape in a member name: a lone surrogate")
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return object{}, err
		}
		if _, seen := o.members[name]; seen && !duplicates {
			return object{}, fmt.Errorf("duplicate field %q", name)
		}
		o.list = append(o.list, member{name, raw})
		o.members[name] = raw
	}
	return o, nil
}

// get is a required member's raw value.
func (o object) get(name string) (json.RawMessage, error) {
	raw, ok := o.members[name]
	if !ok {
		return nil, fmt.Errorf("missing field %q", name)
	}
	return raw, nil
}

// required decodes a member that must be present and not null.
func (o object) required(name string, dst interface{}) error {
	raw, err := o.get(name)
	if err != nil {
		return err
	}
	return at(name, decodeInto(raw, dst))
}

// defaulted decodes a member that may be absent (leaving dst at its zero value) but, when
// present, must not be null.
func (o object) defaulted(name string, dst interface{}) error {
	raw, ok := o.members[name]
	if !ok {
		return nil
	}
	return at(name, decodeInto(raw, dst))
}

// optional decodes a member that may be absent or null, both meaning nil.
func optional[T any](o object, name string, dst **T) error {
	raw, ok := o.members[name]
	if !ok || kindOf(raw) == "null" {
		*dst = nil
		return nil
	}
	v := new(T)
	if err := decodeInto(raw, v); err != nil {
		return at(name, err)
	}
	*dst = v
	return nil
}

// decodeInto decodes one value of a config type; null is an error for every one of them.
func decodeInto(raw json.RawMessage, dst interface{}) error {
	switch d := dst.(type) {
	case *string:
		return decodeString(raw, d)
	case *bool:
		if k := kindOf(raw); k != "a boolean" {
			return fmt.Errorf("expected a boolean, found %s", k)
		}
		*d = bytes.Equal(bytes.TrimSpace(raw), []byte("true"))
		return nil
	case *uint64:
		return decodeNumber(raw, d, "an unsigned integer")
	case *uint32:
		return decodeNumber(raw, d, "an unsigned 32-bit integer")
	case *int64:
		return decodeNumber(raw, d, "an integer")
	case json.Unmarshaler:
		return d.UnmarshalJSON(raw)
	default:
		panic(fmt.Sprintf("budgetagent: no config decoder for %T", dst))
	}
}

// decodeNumber reads an integer that fits dst; a fraction or an exponent is refused even
// when its value is whole, as serde refuses it.
func decodeNumber(raw json.RawMessage, dst interface{}, expected string) error {
	text := bytes.TrimSpace(raw)
	if kindOf(text) != "a number" || json.Unmarshal(text, dst) != nil {
		return fmt.Errorf("expected %s, found %s", expected, describe(text))
	}
	return nil
}

// decodeString reads a string; escapes of lone UTF-16 surrogates are refused as serde
// refuses them (Go would quietly turn them into U+FFFD).
func decodeString(raw []byte, dst *string) error {
	if k := kindOf(raw); k != "a string" {
		return fmt.Errorf("expected a string, found %s", k)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	if loneSurrogate(raw) {
		return errors.New("invalid unicode escape: a lone surrogate")
	}
	*dst = s
	return nil
}

// loneSurrogate says whether a valid JSON string escapes half of a UTF-16 surrogate pair
// without the other half. Looking at the escapes themselves, not at U+FFFD in the result, tells
// a broken pair from a real U+FFFD written beside it.
func loneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escape's letter
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		unit := hexUnit(raw, i+1)
		i += 4
		switch {
		case unit >= 0xdc00 && unit <= 0xdfff:
			return true
		case unit >= 0xd800 && unit <= 0xdbff:
			if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return true
			}
			if low := hexUnit(raw, i+3); low < 0xdc00 || low > 0xdfff {
				return true
			}
			i += 6
		}
	}
	return false
}

// hexUnit reads the four hex digits of a \u escape at raw[at:]; the string is valid JSON, so
// they are there.
func hexUnit(raw []byte, at int) uint64 {
	if at+4 > len(raw) {
		return 0
	}
	unit, _ := strconv.ParseUint(string(raw[at:at+4]), 16, 16)
	return unit
}

// decodeList calls each for every item of a JSON array, locating errors by index.
func decodeList(raw json.RawMessage, each func(item json.RawMessage) error) error {
	if k := kindOf(raw); k != "an array" {
		return fmt.Errorf("expected an array, found %s", k)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return err
	}
	for i, item := range items {
		if err := each(item); err != nil {
			return at(fmt.Sprintf("[%d]", i), err)
		}
	}
	return nil
}

// kindOf names the kind of a JSON value by its first byte, for error messages.
func kindOf(raw []byte) string {
	text := bytes.TrimSpace(raw)
	if len(text) == 0 {
		return "nothing"
	}
	switch text[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// describe shows a scalar in an error message, or names the kind of anything bigger.
func describe(raw []byte) string {
	if k := kindOf(raw); k != "a number" {
		return k
	}
	return string(raw)
}
