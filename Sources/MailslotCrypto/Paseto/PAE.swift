/// Pre-Authentication Encoding (PASETO §2.2.1): an unambiguous encoding of a list of byte
/// strings, used wherever Mailslot signs or MACs several fields at once.
///
/// `LE64(n) || LE64(len(p1)) || p1 || … || LE64(len(pn)) || pn`, where `LE64` is a little-endian
/// unsigned 64-bit integer with its top bit cleared.
public func preAuthenticationEncoding(_ pieces: [[UInt8]]) -> [UInt8] {
    var output: [UInt8] = []
    output.reserveCapacity(8 + pieces.reduce(0) { $0 + 8 + $1.count })
    appendLE64(UInt64(pieces.count), to: &output)
    for piece in pieces {
        appendLE64(UInt64(piece.count), to: &output)
        output.append(contentsOf: piece)
    }
    return output
}

private func appendLE64(_ value: UInt64, to output: inout [UInt8]) {
    let cleared = value & 0x7FFF_FFFF_FFFF_FFFF
    for shift in stride(from: 0, to: 64, by: 8) {
        output.append(UInt8(truncatingIfNeeded: cleared >> UInt64(shift)))
    }
}
