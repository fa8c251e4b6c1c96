/**
 * The items waiting for a decoder, first come first served (stream-decoders.ts and
 * redecode.ts keep one each): `add` queues one and returns how to take it back out;
 * `onAdded` lets the pool serve the queue at once.
 */
export function waitQueue<T>(onAdded: () => void) {
  const items: T[] = [];
  return {
    get length() {
      return items.length;
    },
    shift: () => items.shift(),
    add(item: T): () => void {
      items.push(item);
      onAdded();
      return () => {
        const at = items.indexOf(item);
        if (at >= 0) items.splice(at, 1);
      };
    },
  };
}
