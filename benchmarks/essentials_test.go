package benchmarks

import (
	"math/bits"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkEssentials is not a peer: it is the least an Allocate must do with
// the guarantees this library gives, written out with nothing else, to show
// where the floor is on the machine that runs it. Per allocation it reads the
// clock (the claim's time, which garbage collection needs), looks the owner up
// by its string ID under a lock (idempotency), takes the next free bit of a
// bitmap under a lock, writes a claim record with the owner's strings into a
// block of consecutive addresses under a third lock (the store), adds the owner
// under the first lock, and allocates a result of this library's size. It has
// no pool lookup, no validation, no trace, no interface, no rollback. Compare
// its ns/op with the plain bitmap's (the workloads' floor) and with this
// library's Allocate in the same run.
func BenchmarkEssentials(b *testing.B) {
	type record struct {
		namespace, name, uid, containerID, iface string
		time                                     time.Time
		rev                                      int64
	}
	type block struct {
		used uint64
		recs [64]record
	}
	type result struct { // a one-address Result's size, with its strings
		strings [10]string
		rest    [80]byte
	}
	const window = 64
	var (
		ownerMu, bitmapMu, storeMu sync.Mutex
		owners                     = map[string]uint64{}
		words                      = make([]uint64, 1024)
		blocks                     = map[uint64]*block{}
		cursor                     uint64
		keys                       [window]string
		held                       [window]uint64
	)
	for i := range keys {
		keys[i] = "container-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		now := time.Now()
		ownerMu.Lock()
		_, ok := owners[keys[k]]
		ownerMu.Unlock()
		if ok {
			b.Fatal("owner holds an address already")
		}
		bitmapMu.Lock()
		w := cursor / 64 % uint64(len(words))
		for words[w] == ^uint64(0) {
			w = (w + 1) % uint64(len(words))
		}
		i := w*64 + uint64(bits.TrailingZeros64(^words[w]))
		words[w] |= 1 << (i % 64)
		cursor = i + 1
		bitmapMu.Unlock()
		storeMu.Lock()
		blk := blocks[i/64]
		if blk == nil {
			blk = new(block)
			blocks[i/64] = blk
		}
		blk.used |= 1 << (i % 64)
		blk.recs[i%64] = record{containerID: keys[k], iface: "eth0", time: now, rev: int64(i)}
		storeMu.Unlock()
		ownerMu.Lock()
		owners[keys[k]] = i
		ownerMu.Unlock()
		essentialsSink = new(result)
		held[k] = i
		if k++; k == window {
			b.StopTimer()
			for j, i := range held {
				words[i/64%uint64(len(words))] &^= 1 << (i % 64)
				blocks[i/64].used &^= 1 << (i % 64)
				delete(owners, keys[j])
			}
			k = 0
			b.StartTimer()
		}
	}
}

// essentialsSink keeps BenchmarkEssentials's results on the heap.
var essentialsSink any
