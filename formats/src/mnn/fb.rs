//! A FlatBuffer table as data: fields by id (declaration order in MNN's `.fbs`), serialized
//! bottom-up with the `flatbuffers` builder. Writing tables this way, instead of generating
//! Rust from MNN's schema, keeps the subset we use (docs/mnn-format.md) readable in one place.

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

/// One field value.
#[derive(Clone, Debug)]
pub enum Val {
    Bool(bool),
    I8(i8),
    U8(u8),
    I32(i32),
    F32(f32),
    Str(String),
    I32s(Vec<i32>),
    I64s(Vec<i64>),
    F32s(Vec<f32>),
    Strs(Vec<String>),
    Table(Table),
    Tables(Vec<Table>),
}

/// A table: `(field id, value)` pairs; a union is two fields, `<name>_type` (U8) then the
/// table at the next id.
#[derive(Clone, Debug, Default)]
pub struct Table(pub Vec<(u16, Val)>);

impl Table {
    pub fn new() -> Table {
        Table(Vec::new())
    }

    pub fn with(mut self, id: u16, v: Val) -> Table {
        self.0.push((id, v));
        self
    }
}

/// The vtable slot of field `id`.
fn slot(id: u16) -> u16 {
    4 + 2 * id
}

/// Serializes `root` as a finished buffer without a file identifier (MNN's `Net` has none).
pub fn finish(root: &Table) -> Vec<u8> {
    let mut b = FlatBufferBuilder::with_capacity(1 << 16);
    let off = write(&mut b, root);
    b.finish_minimal(off);
    b.finished_data().to_vec()
}

fn write<'a>(b: &mut FlatBufferBuilder<'a>, t: &Table) -> WIPOffset<UnionWIPOffset> {
    // Children first: offsets must exist before the table that points at them.
    let mut offs: Vec<Option<WIPOffset<UnionWIPOffset>>> = Vec::with_capacity(t.0.len());
    for (_, v) in &t.0 {
        offs.push(match v {
            Val::Str(s) => Some(b.create_string(s).as_union_value()),
            Val::I32s(v) => Some(b.create_vector(v).as_union_value()),
            Val::I64s(v) => Some(b.create_vector(v).as_union_value()),
            Val::F32s(v) => Some(b.create_vector(v).as_union_value()),
            Val::Strs(v) => {
                let s: Vec<_> = v.iter().map(|s| b.create_string(s)).collect();
                Some(b.create_vector(&s).as_union_value())
            }
            Val::Table(c) => Some(write(b, c)),
            Val::Tables(cs) => {
                let o: Vec<_> = cs.iter().map(|c| write(b, c)).collect();
                Some(b.create_vector(&o).as_union_value())
            }
            _ => None,
        });
    }
    let start = b.start_table();
    for ((id, v), off) in t.0.iter().zip(offs) {
        let s = slot(*id);
        match (v, off) {
            (Val::Bool(x), _) => b.push_slot_always(s, *x),
            (Val::I8(x), _) => b.push_slot_always(s, *x),
            (Val::U8(x), _) => b.push_slot_always(s, *x),
            (Val::I32(x), _) => b.push_slot_always(s, *x),
            (Val::F32(x), _) => b.push_slot_always(s, *x),
            (_, Some(o)) => b.push_slot_always(s, o),
            (_, None) => unreachable!("every offset value was written above"),
        }
    }
    let end = b.end_table(start);
    WIPOffset::new(end.value())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal safe reader: the position of field `id` of the table at `at`, if present.
    fn field(buf: &[u8], at: usize, id: usize) -> Option<usize> {
        let soff = i32::from_le_bytes(buf[at..at + 4].try_into().unwrap());
        let vt = (at as i64 - soff as i64) as usize;
        let vt_len = u16::from_le_bytes([buf[vt], buf[vt + 1]]) as usize;
        if 4 + 2 * id >= vt_len {
            return None;
        }
        let o = u16::from_le_bytes([buf[vt + 4 + 2 * id], buf[vt + 5 + 2 * id]]) as usize;
        (o != 0).then_some(at + o)
    }

    fn deref(buf: &[u8], at: usize) -> usize {
        at + u32::from_le_bytes(buf[at..at + 4].try_into().unwrap()) as usize
    }

    #[test]
    fn fields_land_where_the_schema_ids_say() {
        let child = Table::new().with(1, Val::I32(-7));
        let root = Table::new()
            .with(0, Val::Str("net".into()))
            .with(2, Val::I32s(vec![1, -1, 3]))
            .with(3, Val::Table(child))
            .with(5, Val::U8(9))
            .with(6, Val::F32(0.5));
        let buf = finish(&root);
        let r = deref(&buf, 0);
        assert_eq!(field(&buf, r, 1), None);
        let s = deref(&buf, field(&buf, r, 0).unwrap());
        assert_eq!(&buf[s..s + 7], b"\x03\0\0\0net");
        let v = deref(&buf, field(&buf, r, 2).unwrap());
        let ints: Vec<i32> = (0..3)
            .map(|i| i32::from_le_bytes(buf[v + 4 + 4 * i..v + 8 + 4 * i].try_into().unwrap()))
            .collect();
        assert_eq!(ints, [1, -1, 3]);
        let c = deref(&buf, field(&buf, r, 3).unwrap());
        let x = field(&buf, c, 1).unwrap();
        assert_eq!(i32::from_le_bytes(buf[x..x + 4].try_into().unwrap()), -7);
        assert_eq!(buf[field(&buf, r, 5).unwrap()], 9);
        let f = field(&buf, r, 6).unwrap();
        assert_eq!(f32::from_le_bytes(buf[f..f + 4].try_into().unwrap()), 0.5);
    }
}
