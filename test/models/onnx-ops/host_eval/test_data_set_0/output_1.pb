By1J s¿zC‹¬‘Ã¡ýŸCžÄ¸Ã•EÊC6ozCxù‘ÃíkŸC´î¸ÃgêÊC
G~CzÜ‘Ã§a CÆ$¸Ã9lËC+¨zC7’Ãt! CKB¸ÃmïÊC‰U{C!’ÃçœŸCÿu¹ÃoÊCÄy|C²8‘Ã#è Cž3¸ÃZzËCqè|CœX’Ãª&ŸC<¸Ãp&ÊC®{C)²‘Ã;JŸCÞ;¸Ã¹¦ËC