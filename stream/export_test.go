package stream

// CorruptFin makes c's FIN announce a different CRC-32C (or, with
// lengthToo, one byte more) than what c wrote.
func CorruptFin(c *Conn, lengthToo bool) {
	c.finHook = func(m *msg) {
		m.sum ^= 1
		if lengthToo {
			m.bytes++
		}
	}
}
