package actors

// deque is a ring buffer of items: requests join at the back, retried
// requests are put back by age, batches leave from the front. It grows by
// doubling; the batcher bounds how many items it holds.
type deque struct {
	buf  []Item
	head int
	n    int
}

func (d *deque) len() int { return d.n }

// at returns the i-th item from the front.
func (d *deque) at(i int) *Item { return &d.buf[(d.head+i)&(len(d.buf)-1)] }

func (d *deque) grow() {
	if d.n < len(d.buf) {
		return
	}
	size := max(2*len(d.buf), 16)
	buf := make([]Item, size)
	for i := 0; i < d.n; i++ {
		buf[i] = *d.at(i)
	}
	d.buf, d.head = buf, 0
}

func (d *deque) pushBack(it Item) {
	d.grow()
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = it
	d.n++
}

func (d *deque) popFront() Item {
	if d.n == 0 {
		panic("batchd: pop from an empty queue")
	}
	p := d.at(0)
	it := *p
	*p = Item{} // drop references so the request can be collected
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	return it
}

// insertByEnqueue puts it before the first item that was enqueued after it,
// so the front stays the oldest request even when retries come back.
func (d *deque) insertByEnqueue(it Item) {
	d.grow()
	i := 0
	for i < d.n && d.at(i).Enqueue <= it.Enqueue {
		i++
	}
	d.n++
	for j := d.n - 1; j > i; j-- {
		*d.at(j) = *d.at(j - 1)
	}
	*d.at(i) = it
}

// removeIf removes, in order, every item for which drop returns true, and
// calls drop exactly once per item. It keeps the order of the others.
func (d *deque) removeIf(drop func(*Item) bool) {
	w := 0
	for r := 0; r < d.n; r++ {
		it := d.at(r)
		if drop(it) {
			continue
		}
		if w != r {
			*d.at(w) = *it
		}
		w++
	}
	for i := w; i < d.n; i++ {
		*d.at(i) = Item{}
	}
	d.n = w
}
