//! The guide: one request's cursor through a shared token index.
//!
//! An index answers questions about states; a guide remembers which state one generation is in.
//! It is a state number plus the states it came through, so that speculative decoding can accept
//! a run of draft tokens and roll back the ones the target model rejected. Everything heavy (masks,
//! transitions) lives in the [`TokenIndex`], which many guides share.
//!
//! Errors leave the guide unchanged: `advance` with a token the constraint forbids raises and keeps
//! the state, and `accept_tokens` either takes the whole run or none of it. The rollback history is
//! bounded by `max_rollback` (unlimited when `None`), so a long generation does not grow it forever.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::index::{TokenIndex, DEAD, TERMINAL};

/// One generation's position in a constraint.
#[derive(Debug, Clone)]
pub struct Guide {
    index: Arc<TokenIndex>,
    state: u32,
    history: VecDeque<u32>,
    max_rollback: Option<usize>,
}

impl Guide {
    /// A guide at the index's start state, remembering up to `max_rollback` steps (`None`: all).
    pub fn new(index: Arc<TokenIndex>, max_rollback: Option<usize>) -> Self {
        let state = index.initial_state();
        Guide {
            index,
            state,
            history: VecDeque::new(),
            max_rollback,
        }
    }

    /// The index this guide walks.
    pub fn index(&self) -> &Arc<TokenIndex> {
        &self.index
    }

    /// The current state ([`TERMINAL`] once EOS was accepted).
    pub fn state(&self) -> u32 {
        self.state
    }

    /// Whether EOS has been accepted.
    pub fn is_terminated(&self) -> bool {
        self.state == TERMINAL
    }

    /// Whether the text so far is a complete match (EOS may come next).
    pub fn is_accepting(&self) -> bool {
        self.index.is_accepting(self.state)
    }

    /// Whether nothing but EOS may follow: EOS accepted, or a final state reached.
    pub fn is_finished(&self) -> Result<bool> {
        self.index.is_final(self.state)
    }

    /// Steps the history can roll back.
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    fn push(&mut self, next: u32) {
        if self.max_rollback != Some(0) {
            self.history.push_back(self.state);
            if let Some(max) = self.max_rollback {
                while self.history.len() > max {
                    self.history.pop_front();
                }
            }
        }
        self.state = next;
    }

    /// Consumes `token`, or fails with [`Error::InvalidToken`] and leaves the state unchanged.
    pub fn advance(&mut self, token: i64) -> Result<()> {
        let next = self.index.next_state(self.state, token)?;
        if next == DEAD {
            return Err(Error::InvalidToken {
                token,
                state: self.state,
                message: "the constraint does not allow this token here".to_string(),
            });
        }
        self.push(next);
        Ok(())
    }

    /// Consumes `token` if allowed; `Ok(false)` (state unchanged) if not. Ids out of range are
    /// errors, not refusals.
    pub fn accept_token(&mut self, token: i64) -> Result<bool> {
        match self.advance(token) {
            Ok(()) => Ok(true),
            Err(Error::InvalidToken { token: t, .. })
                if t >= 0 && (t as u64) < self.index.vocab_size() as u64 =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Consumes all of `tokens` if every one is allowed in turn; otherwise consumes none.
    pub fn accept_tokens(&mut self, tokens: &[i64]) -> Result<bool> {
        if self.validate_tokens(tokens)? != tokens.len() {
            return Ok(false);
        }
        for &t in tokens {
            self.advance(t)?;
        }
        Ok(true)
    }

    /// The length of the longest prefix of `tokens` the constraint accepts; the state is unchanged.
    pub fn validate_tokens(&self, tokens: &[i64]) -> Result<usize> {
        let mut state = self.state;
        for (i, &t) in tokens.iter().enumerate() {
            let next = self.index.next_state(state, t)?;
            if next == DEAD {
                return Ok(i);
            }
            state = next;
        }
        Ok(tokens.len())
    }

    /// Undoes the last `n` accepted tokens.
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        if n > self.history.len() {
            return Err(Error::Invalid(format!(
                "cannot roll back {n} tokens: only {} are remembered (max_rollback = {})",
                self.history.len(),
                self.max_rollback
                    .map_or("unlimited".to_string(), |m| m.to_string())
            )));
        }
        for _ in 0..n {
            if let Some(prev) = self.history.pop_back() {
                self.state = prev;
            }
        }
        Ok(())
    }

    /// Back to the start, history forgotten.
    pub fn reset(&mut self) {
        self.state = self.index.initial_state();
        self.history.clear();
    }

    /// Writes this guide's next-token mask into `out` (exactly `ceil(vocab_size/32)` words): EOS
    /// only once finished.
    pub fn fill_mask(&self, out: &mut [u32]) -> Result<()> {
        self.index.mask(self.state)?.write_to(out);
        Ok(())
    }

    /// The bytes every valid continuation starts with (for jump-forward decoding).
    pub fn forced_bytes(&self) -> Result<Vec<u8>> {
        self.index.forced_bytes(self.state, 1 << 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::IndexConfig;
    use crate::regex::parse;
    use crate::vocab::Vocabulary;

    fn guide(pattern: &str, max_rollback: Option<usize>) -> Guide {
        let tokens: Vec<Option<Vec<u8>>> = ["a", "b", "ab", "c"]
            .iter()
            .map(|t| Some(t.as_bytes().to_vec()))
            .chain([None])
            .collect();
        let v = Arc::new(Vocabulary::new(tokens, vec![4], None).expect("vocabulary"));
        let trie = Arc::new(TokenIndex::trie_for(&v));
        let idx = TokenIndex::from_hir(&parse(pattern).unwrap(), v, trie, &IndexConfig::default())
            .expect("index");
        Guide::new(Arc::new(idx), max_rollback)
    }

    #[test]
    fn advance_refuses_without_moving() {
        let mut g = guide("ab+c", None);
        let start = g.state();
        assert!(matches!(g.advance(3), Err(Error::InvalidToken { .. })));
        assert_eq!(g.state(), start);
        assert!(!g.accept_token(1).unwrap());
        assert!(g.accept_token(2).unwrap());
        assert!(g.accept_tokens(&[1, 1, 3]).unwrap());
        assert!(g.is_finished().unwrap() && !g.is_terminated());
        g.advance(4).unwrap();
        assert!(g.is_terminated());
    }

    #[test]
    fn accept_tokens_is_all_or_nothing_and_validate_does_not_move() {
        let mut g = guide("ab+c", None);
        assert_eq!(g.validate_tokens(&[0, 1, 1, 0]).unwrap(), 3);
        assert!(!g.accept_tokens(&[0, 1, 1, 0]).unwrap());
        assert_eq!(g.state(), 1);
        assert!(g.validate_tokens(&[0, 99]).is_err());
    }

    #[test]
    fn rollback_restores_states_within_its_bound() {
        let mut g = guide("ab+c", Some(2));
        let mut seen = vec![g.state()];
        for t in [0, 1, 1, 1] {
            g.advance(t).unwrap();
            seen.push(g.state());
        }
        g.rollback(2).unwrap();
        assert_eq!(g.state(), seen[2]);
        assert!(g.rollback(1).is_err());
        g.reset();
        assert_eq!((g.state(), g.history_len()), (1, 0));
    }
}
