use super::*;
use std::time::Duration;

#[tokio::test]
async fn a_waiting_review_lets_another_one_compute() {
    let slots = Slots::new(1);
    let first = Slot::acquire(slots.clone(), "a")
        .await
        .expect("a free slot");
    let deadline = Instant::now() + Duration::from_secs(5);
    let second = async {
        // Only possible once the first has given its slot back.
        let second = Slot::acquire(slots.clone(), "a")
            .await
            .expect("the slot given back");
        assert!(second.holding());
        drop(second);
    };
    // The first waits (as on a lookup) until the second has run.
    let (_, ()) = tokio::join!(
        first.away(deadline, tokio::time::sleep(Duration::from_millis(50))),
        second
    );
    assert!(first.holding(), "the slot is taken again after the wait");
    assert_eq!(slots.available(), 0);
    drop(first);
    assert_eq!(slots.available(), 1);
}

#[tokio::test]
async fn the_slot_is_taken_again_only_by_the_deadline() {
    let slots = Slots::new(1);
    let first = Slot::acquire(slots.clone(), "a")
        .await
        .expect("a free slot");
    let deadline = Instant::now() + Duration::from_millis(100);
    let mut other = None;
    first
        .away(deadline, async {
            // Someone else takes the slot while the first waits, and keeps it.
            other = Some(
                Slot::acquire(slots.clone(), "a")
                    .await
                    .expect("the slot given back"),
            );
        })
        .await;
    assert!(
        !first.holding(),
        "past the deadline the review goes on without a slot"
    );
    drop(other);
    drop(first);
    assert_eq!(slots.available(), 1);
}

#[tokio::test]
async fn nested_waits_give_the_slot_back_once() {
    let slots = Slots::new(2);
    let slot = Slot::acquire(slots.clone(), "a")
        .await
        .expect("a free slot");
    let deadline = Instant::now() + Duration::from_secs(5);
    slot.away(deadline, async {
        assert_eq!(slots.available(), 2);
        slot.away(deadline, async {}).await;
        // The inner wait ended, the outer one goes on: still without a slot.
        assert!(!slot.holding());
    })
    .await;
    assert!(slot.holding());
    assert_eq!(slots.available(), 1);
}

#[tokio::test]
async fn one_flow_holds_at_most_half_the_slots() {
    let slots = Slots::new(4);
    let mut tenant = Vec::new();
    for _ in 0..2 {
        tenant.push(Slot::acquire(slots.clone(), "tenant").await.expect("free"));
    }
    // The tenant's third review waits, with two slots free...
    let third = tokio::time::timeout(
        Duration::from_millis(50),
        Slot::acquire(slots.clone(), "tenant"),
    )
    .await;
    assert!(third.is_err(), "a flow's third review waits");
    assert_eq!(slots.available(), 2);
    // ...which another namespace's reviews take at once.
    let other = Slot::acquire(slots.clone(), "other").await.expect("free");
    let cluster = Slot::acquire(slots.clone(), "").await.expect("free");
    assert_eq!(slots.available(), 0);
    drop((other, cluster, tenant));
    assert_eq!(slots.available(), 4);
}

#[tokio::test]
async fn freed_slots_go_to_the_waiting_flows_in_turn() {
    let slots = Slots::new(2);
    let tenant = Slot::acquire(slots.clone(), "tenant").await.expect("free");
    let other = Slot::acquire(slots.clone(), "other").await.expect("free");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiting = tokio::task::JoinSet::new();
    // Three more of the tenant's reviews queue first, then one of another namespace.
    for (i, flow) in ["tenant", "tenant", "tenant", "third"]
        .into_iter()
        .enumerate()
    {
        let (slots, order) = (slots.clone(), order.clone());
        waiting.spawn(async move {
            let slot = Slot::acquire(slots, flow).await.expect("a slot in turn");
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("{flow}-{i}"));
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(slot);
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Both slots come free: the first goes to the tenant's next review (it queued first), the
    // second to the third namespace's, before the tenant's other two: flows take turns.
    drop(tenant);
    drop(other);
    while waiting.join_next().await.is_some() {}
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let third = order.iter().position(|o| o == "third-3").expect("served");
    assert!(
        third <= 1,
        "the third namespace is served in the first turn: {order:?}"
    );
    assert_eq!(slots.available(), 2);
}

#[tokio::test]
async fn a_review_that_stops_waiting_passes_its_turn_on() {
    let slots = Slots::new(1);
    let held = Slot::acquire(slots.clone(), "a").await.expect("free");
    // Gives up waiting (its deadline).
    let gave_up =
        tokio::time::timeout(Duration::from_millis(20), Slot::acquire(slots.clone(), "b")).await;
    assert!(gave_up.is_err());
    let next = tokio::spawn({
        let slots = slots.clone();
        async move { Slot::acquire(slots, "c").await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(held);
    next.await.expect("joined").expect("the slot passed on");
    assert_eq!(slots.available(), 1);
}

#[tokio::test]
async fn closed_slots_refuse_reviews() {
    let slots = Slots::new(1);
    let held = Slot::acquire(slots.clone(), "a").await.expect("free");
    let waiting = tokio::spawn({
        let slots = slots.clone();
        async move { Slot::acquire(slots, "b").await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    slots.close();
    assert_eq!(waiting.await.expect("joined"), Err(Closed));
    assert!(Slot::acquire(slots.clone(), "c").await.is_err());
    drop(held);
}
