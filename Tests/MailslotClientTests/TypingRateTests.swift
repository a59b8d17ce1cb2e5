@testable import MailslotClient
import MailslotWire
import Testing

/// The typing rate to groups (``TypingRate``; spec/groups.md §4.5): one `active: true` per 5 s
/// per group, counted from the last one admitted; a send that failed gives its turn back; groups
/// not typed into for 5 s are forgotten.
@Suite struct TypingRateTests {
    @Test func oneActivePerFiveSecondsPerGroup() {
        var rate = TypingRate()
        let trip = GroupID.random(), crew = GroupID.random()
        let start = ContinuousClock.now
        // Each step: (group, seconds after start) and whether it is admitted.
        func admits(_ group: GroupID, _ seconds: Double) -> Bool { rate.admit(group, at: start + .seconds(seconds)) }
        #expect(admits(trip, 0) == true)
        #expect(admits(trip, 4.999) == false)
        #expect(admits(crew, 1) == true, "per group")
        #expect(admits(trip, 5) == true)
        #expect(admits(trip, 9) == false, "from the last one admitted")

        // A send that could not be stored gives its turn back; revoking another instant does not.
        #expect(admits(crew, 7) == true)
        rate.revoke(crew, admittedAt: start + .seconds(7))
        #expect(admits(crew, 7.5) == true)
        rate.revoke(crew, admittedAt: start + .seconds(7))
        #expect(admits(crew, 8) == false, "revoking another instant leaves the turn")

        // Groups not typed into for 5 s are dropped as others come: a bounded map.
        #expect(rate.last.count == 2)
        #expect(admits(GroupID.random(), 60) == true)
        #expect(rate.last.count == 1)
    }
}
