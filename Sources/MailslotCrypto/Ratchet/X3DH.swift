// The start of a ratchet (spec/ratchet.md §3), X3DH as Signal specifies it
// (https://signal.org/docs/specifications/x3dh/), over X25519 with the Ed25519 identity keys in
// their X25519 form:
//
//   DH1 = DH(IK_A, SPK_B)   DH2 = DH(EK_A, IK_B)   DH3 = DH(EK_A, SPK_B)   DH4 = DH(EK_A, OPK_B)
//   SK  = HKDF-SHA-256(salt: 32 × 0x00, ikm: 32 × 0xFF ‖ DH1 ‖ DH2 ‖ DH3 [‖ DH4],
//                      info: "mailslot-x3dh-v2", 32)
//
// DH1 and DH2 authenticate both identities (deniably: no signature); DH3 and DH4 give forward
// secrecy. Every DH output that is all zeros is refused.

/// The X3DH key agreements of both sides.
enum X3DH {
    static let info = Array("mailslot-x3dh-v2".utf8)

    /// The initiator's (Alice's) shared secret with the responder's published keys.
    static func initiatorSecret(identity: IdentityKeyPair, ephemeral: X25519KeyPair, peerIdentity: IdentityPublicKey,
                                signedPrekey: X25519PublicKey, oneTimePrekey: X25519PublicKey?) throws(EnvelopeError) -> SecretBytes {
        guard let peerAgreement = peerIdentity.agreementKey else { throw .ratchetMismatch }
        let own = identity.agreementKeyPair
        var outputs = [own.agree(with: signedPrekey), ephemeral.agree(with: peerAgreement), ephemeral.agree(with: signedPrekey)]
        if let oneTimePrekey { outputs.append(ephemeral.agree(with: oneTimePrekey)) }
        return try derive(outputs)
    }

    /// The responder's (Bob's) shared secret with what the initiator's first message names.
    static func responderSecret(identity: IdentityKeyPair, signedPrekey: X25519KeyPair, oneTimePrekey: X25519KeyPair?,
                                peerIdentity: IdentityPublicKey, ephemeral: X25519PublicKey) throws(EnvelopeError) -> SecretBytes {
        guard let peerAgreement = peerIdentity.agreementKey else { throw .ratchetMismatch }
        let own = identity.agreementKeyPair
        var outputs = [signedPrekey.agree(with: peerAgreement), own.agree(with: ephemeral), signedPrekey.agree(with: ephemeral)]
        if let oneTimePrekey { outputs.append(oneTimePrekey.agree(with: ephemeral)) }
        return try derive(outputs)
    }

    private static func derive(_ outputs: consuming [[UInt8]?]) throws(EnvelopeError) -> SecretBytes {
        var outputs = outputs
        var material = [UInt8](repeating: 0xFF, count: 32)
        material.reserveCapacity(32 * 5)  // no reallocation leaves an unwiped copy behind
        defer {
            wipe(&material)
            for index in outputs.indices where outputs[index] != nil { wipe(&outputs[index]!) }
        }
        for output in outputs {
            guard let output else { throw .ratchetMismatch }  // an all-zero DH: a low-order key
            material += output
        }
        var secret = hkdfSHA256(salt: [], inputKeyMaterial: material, info: info, length: 32)
        defer { wipe(&secret) }
        return SecretBytes(copying: secret)
    }
}
