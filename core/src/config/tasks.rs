//! `[data] classes_per_task`: one count for every task (`2`), or one count per task
//! (`[6, 1, 1, 1, 1]`, uneven tasks as in the field's "B50-Inc10" protocol of Hou et al. 2019,
//! "Learning a Unified Classifier Incrementally via Rebalancing": a first task of half the
//! classes, then a few classes a task). [`ClassesPerTask::deal`] turns it into each task's
//! classes; the config's checks (`checks.rs`) refuse a zero count, an empty list and a `tasks`
//! that disagrees with the list's length.

use serde::{Deserialize, Serialize};

/// How many classes each task of a split scenario gets.
///
/// In TOML an integer (`classes_per_task = 2`: every task) or a list of integers
/// (`classes_per_task = [6, 1, 1, 1, 1]`: task `t` gets the `t`-th count, and the list's length
/// is the number of tasks). Anything else is a positioned config error naming both forms.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum ClassesPerTask {
    /// The same number of classes in every task.
    Each(usize),
    /// Task `t` gets `counts[t]` classes; `counts.len()` tasks.
    List(Vec<usize>),
}

impl From<usize> for ClassesPerTask {
    fn from(n: usize) -> Self {
        Self::Each(n)
    }
}

impl From<Vec<usize>> for ClassesPerTask {
    fn from(counts: Vec<usize>) -> Self {
        Self::List(counts)
    }
}

impl std::fmt::Display for ClassesPerTask {
    /// As it is written in TOML: `2` or `[6, 1, 1, 1, 1]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Each(n) => write!(f, "{n}"),
            Self::List(v) => {
                let items: Vec<String> = v.iter().map(usize::to_string).collect();
                write!(f, "[{}]", items.join(", "))
            }
        }
    }
}

impl<'de> Deserialize<'de> for ClassesPerTask {
    /// An integer ≥ 0 or a list of them (a custom visitor rather than `#[serde(untagged)]`,
    /// whose error names neither form).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ClassesPerTask;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a whole number of classes per task (2) or a list of one count per task \
                     ([6, 1, 1, 1, 1])",
                )
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                usize::try_from(v)
                    .map(ClassesPerTask::Each)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                usize::try_from(v)
                    .map(ClassesPerTask::Each)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut counts = Vec::new();
                while let Some(n) = seq.next_element::<usize>()? {
                    counts.push(n);
                }
                Ok(ClassesPerTask::List(counts))
            }
        }
        d.deserialize_any(V)
    }
}

impl ClassesPerTask {
    /// The number of tasks the list gives (`None` for one count for every task).
    pub fn listed_tasks(&self) -> Option<usize> {
        match self {
            Self::Each(_) => None,
            Self::List(v) => Some(v.len()),
        }
    }

    /// Deals the classes of `order` (in that order) into tasks: with [`ClassesPerTask::Each`]
    /// `tasks` tasks of `n` classes (`tasks` defaults to `order.len() / n`); with
    /// [`ClassesPerTask::List`] one task per count, task `t` taking the next `counts[t]`
    /// classes. Returns each task's classes.
    ///
    /// # Errors
    /// A message for a count of 0, counts that need more classes than `order` holds, zero
    /// tasks, or a `tasks` that differs from the list's length.
    pub fn deal(
        &self,
        tasks: Option<usize>,
        order: &[usize],
    ) -> std::result::Result<Vec<Vec<usize>>, String> {
        let n = order.len();
        let classes = |k: usize| if k == 1 { "class" } else { "classes" };
        let counts = match self {
            Self::Each(c) => {
                let c = *c;
                if c == 0 || c > n {
                    return Err(format!(
                        "classes_per_task = {c} with {n} {}: set [data] classes_per_task to \
                         1..={n} (and tasks × classes_per_task to at most {n}), or use data with \
                         more classes",
                        classes(n)
                    ));
                }
                let t = tasks.unwrap_or(n / c);
                if t == 0 || t * c > n {
                    return Err(format!(
                        "{t} tasks × {c} classes per task needs {} classes; the dataset and \
                         class_order give {n}",
                        t * c
                    ));
                }
                vec![c; t]
            }
            Self::List(v) => {
                if let Some(t) = tasks.filter(|&t| t != v.len()) {
                    return Err(format!(
                        "tasks = {t} but classes_per_task = {self} lists {} tasks",
                        v.len()
                    ));
                }
                let sum: usize = v.iter().sum();
                if v.is_empty() || v.contains(&0) || sum > n {
                    return Err(format!(
                        "classes_per_task = {self} deals {sum} {} but the dataset and \
                         class_order give {n}: list 1 or more classes per task, {n} in all at \
                         most",
                        classes(sum)
                    ));
                }
                v.clone()
            }
        };
        let mut start = 0;
        Ok(counts
            .into_iter()
            .map(|c| {
                start += c;
                order[start - c..start].to_vec()
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug)]
    struct D {
        c: ClassesPerTask,
    }

    fn parse(v: &str) -> Result<ClassesPerTask, String> {
        toml::from_str::<D>(&format!("c = {v}"))
            .map(|d| d.c)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn an_integer_or_a_list_and_nothing_else() {
        assert_eq!(parse("2"), Ok(ClassesPerTask::Each(2)));
        assert_eq!(parse("[6, 1, 1]"), Ok(ClassesPerTask::List(vec![6, 1, 1])));
        assert_eq!(parse("[]"), Ok(ClassesPerTask::List(vec![])));
        for bad in ["\"2\"", "2.5", "-1", "[1, -2]", "[1, \"a\"]"] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.contains("a whole number of classes per task") || e.contains("usize"),
                "{bad}: {e}"
            );
        }
        assert_eq!(ClassesPerTask::List(vec![6, 1]).to_string(), "[6, 1]");
        // Written back as it was read (the run's config.toml, the library's config text).
        assert_eq!(
            toml::Value::try_from(ClassesPerTask::List(vec![6, 1])).unwrap(),
            toml::Value::Array(vec![6.into(), 1.into()])
        );
        assert_eq!(
            toml::Value::try_from(ClassesPerTask::Each(2)).unwrap(),
            toml::Value::Integer(2)
        );
    }

    #[test]
    fn deals_even_and_uneven_tasks_in_class_order() {
        let order: Vec<usize> = (0..10).rev().collect();
        let even = ClassesPerTask::Each(3).deal(None, &order).unwrap();
        assert_eq!(even, vec![vec![9, 8, 7], vec![6, 5, 4], vec![3, 2, 1]]);
        assert_eq!(
            ClassesPerTask::Each(3).deal(Some(1), &order).unwrap().len(),
            1
        );
        let uneven = ClassesPerTask::List(vec![6, 1, 2])
            .deal(None, &order)
            .unwrap();
        assert_eq!(uneven, vec![vec![9, 8, 7, 6, 5, 4], vec![3], vec![2, 1]]);
        assert_eq!(
            ClassesPerTask::List(vec![6, 1, 2]).deal(Some(3), &order),
            Ok(uneven)
        );
    }

    #[test]
    fn refuses_what_the_classes_cannot_fill() {
        let order: Vec<usize> = (0..10).collect();
        let err = |c: ClassesPerTask, t| c.deal(t, &order).unwrap_err();
        assert!(err(vec![6, 5].into(), None).contains("deals 11 classes"));
        assert!(err(vec![6, 0].into(), None).contains("1 or more"));
        assert!(err(vec![].into(), None).contains("deals 0 classes"));
        assert_eq!(
            err(vec![6, 1].into(), Some(3)),
            "tasks = 3 but classes_per_task = [6, 1] lists 2 tasks"
        );
        assert!(err(11.into(), None).starts_with("classes_per_task = 11 with 10 classes"));
        assert!(err(3.into(), Some(4)).starts_with("4 tasks × 3 classes per task needs 12"));
    }
}
